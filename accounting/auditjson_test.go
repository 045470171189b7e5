package accounting

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestAuditEntryAppendJSONMatchesMarshal: AppendJSON writes exactly
// json.Marshal's bytes (and fails where it fails) for entries with every
// field set or zero, strings that need escaping (HTML characters,
// controls, U+2028, invalid UTF-8), times in UTC, in zones with odd
// offsets, zero, and outside what RFC 3339 allows; a field added to
// AuditEntry later is caught by the field count.
func TestAuditEntryAppendJSONMatchesMarshal(t *testing.T) {
	if n := reflect.TypeFor[AuditEntry]().NumField(); n != 9 {
		t.Fatalf("AuditEntry has %d fields, AppendJSON writes 9: write the new one there and here", n)
	}
	strs := []string{"", "alice", "POST /v1/jobs", "job 17", "200 ok", "127.11.1.3:40112", "<&>", "é ü", "tab\there",
		`quo"te`, `back\slash`, "\x01ctl", "\u2028\u2029", "日本", "bad \xff utf-8", "400 invalid: name \"x\" is…"}
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("half", 5*3600+1800), time.FixedZone("neg", -(9*3600 + 30*60)),
		time.FixedZone("secs", 3600+17), time.FixedZone("big", 25*3600), time.FixedZone("bigneg", -(24*3600 + 60))}
	times := func(r *rand.Rand) time.Time {
		switch r.IntN(8) {
		case 0:
			return time.Time{}
		case 1:
			return time.Date(10000+r.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC)
		case 2:
			return time.Date(-r.IntN(3), 12, 31, 23, 59, 59, 0, time.UTC)
		case 3:
			return time.Unix(r.Int64N(4e9), 0).In(zones[r.IntN(len(zones))])
		}
		return time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(zones[r.IntN(len(zones))])
	}
	r := rand.New(rand.NewPCG(31, 15))
	pick := func() string { return strs[r.IntN(len(strs))] }
	failed := 0
	for i := range 20000 {
		e := AuditEntry{Time: times(r), ActorUID: []uint32{0, 1000, 4294967295}[r.IntN(3)], ActorName: pick(), Role: pick(),
			Origin: pick(), Action: pick(), Target: pick(), Result: pick(), Summarised: []int{0, 1, 37, -2, 1 << 40}[r.IntN(5)]}
		want, werr := json.Marshal(&e)
		prefix := []byte("prefix")
		got, gerr := e.AppendJSON(prefix)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("entry %d %+v: json.Marshal error %v, AppendJSON error %v", i, e, werr, gerr)
		}
		if werr != nil {
			failed++
			continue
		}
		if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("entry %d %+v:\nAppendJSON  %s\njson.Marshal %s", i, e, got, want)
		}
	}
	if failed == 0 || failed > 20000/2 {
		t.Fatalf("%d of 20000 entries have a time json.Marshal refuses; want some, and most not", failed)
	}
	// The form the API server writes (UTC, plain ASCII) is encoded by
	// hand, not handed to json.Marshal: no allocation into a buffer with
	// room.
	e := AuditEntry{Time: time.Unix(1_800_000_000, 123456789).UTC(), ActorUID: 1000, ActorName: "alice", Role: "user",
		Origin: "127.0.0.1:5", Action: "POST /v1/jobs", Target: "job 7", Result: "in progress"}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { _, _ = e.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("AppendJSON of a plain entry allocates %v times; want 0 (it fell back to json.Marshal)", n)
	}
}

// BenchmarkAuditEntryJSON: one submission's audit entry, by
// encoding/json and by hand.
func BenchmarkAuditEntryJSON(b *testing.B) {
	e := AuditEntry{Time: time.Now(), ActorUID: 1000, ActorName: "alice", Role: "user", Origin: "127.11.1.3:40112",
		Action: "POST /v1/jobs", Target: "job 123456", Result: "in progress"}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.AppendJSON(make([]byte, 0, 256)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
