package store

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// The admin's live state survives a reopen; a record without data is
// deleted.
func TestAdminRecordsRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	recs := []spec.AdminRecord{
		{Kind: spec.AdminPartition, Name: "gpu", Data: []byte(`{"name":"gpu","state":"DOWN"}`)},
		{Kind: spec.AdminNode, Name: "n1", Data: []byte(`{"name":"n1","weight":5}`)},
		{Kind: spec.AdminNode, Name: "n2", Data: []byte(`{"name":"n2","state":"FAIL"}`)},
	}
	if err := s.ApplyAdmin(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyAdmin(ctx, []spec.AdminRecord{{Kind: spec.AdminNode, Name: "n2"}, {Kind: spec.AdminNode, Name: "n1", Data: []byte(`{"name":"n1","weight":7}`)}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	got, err := open(t, path).LoadAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []spec.AdminRecord{
		{Kind: spec.AdminNode, Name: "n1", Data: []byte(`{"name":"n1","weight":7}`)},
		{Kind: spec.AdminPartition, Name: "gpu", Data: []byte(`{"name":"gpu","state":"DOWN"}`)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("admin records after reopen (-want +got):\n%s", d)
	}
}
