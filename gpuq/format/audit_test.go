package format

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

func testAudit() []api.AuditEntry {
	t0 := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	return []api.AuditEntry{
		{Time: t0, ActorUID: 1001, ActorName: "alice", Role: "user", Origin: "unix", Action: "POST /v1/jobs", Target: "jobs 7-9", Result: "200 ok"},
		{Time: t0.Add(time.Minute), ActorUID: 1002, ActorName: "bob", Role: "user", Origin: "10.0.0.7:51234", Action: "POST /v1/jobs/{id}/cancel",
			Target: "job 7", Result: "403 job 7 belongs to alice; only alice, an operator or root may cancel it"},
		{Time: t0.Add(2 * time.Minute), ActorUID: 0, ActorName: "root", Role: "admin", Origin: "unix", Action: "POST /v1/nodes/{name}/drain", Target: "node gpu01", Result: "200 ok"},
		{Time: t0.Add(3 * time.Minute), ActorUID: 4242, Role: "admin", Origin: "unix", Action: "POST /v1/reconfigure", Result: "200 ok"},
	}
}

func TestWriteAuditGolden(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noHeader bool
	}{{"audit_table.golden", false}, {"audit_noheader.golden", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteAudit(&b, testAudit(), tc.noHeader); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
	var b bytes.Buffer
	if err := WriteAuditJSON(&b, testAudit()); err != nil {
		t.Fatal(err)
	}
	golden(t, "audit.json.golden", b.Bytes())
	b.Reset()
	if err := WriteAuditJSON(&b, nil); err != nil || b.String() != "[]\n" {
		t.Errorf("no entries as JSON = %q, %v; want []", b.String(), err)
	}
}
