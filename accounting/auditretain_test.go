package accounting

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The audit log keeps an age and a size: PruneAudit deletes what is
// older, then the oldest rows until the estimate is within the size; the
// estimate follows writes, outcomes, folded refusals and prunes, and the
// file stops growing once rows are pruned for new ones.
func TestPruneAudit(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var ws []AuditWrite
	for i := range 3000 {
		ws = append(ws, AuditWrite{Entry: AuditEntry{Time: t0.Add(time.Duration(i) * time.Minute), ActorName: "alice", Origin: "unix",
			Action: "POST /v1/jobs", Result: "200 ok " + strings.Repeat("x", 100)}})
	}
	if err := db.WriteAudits(ctx, ws); err != nil {
		t.Fatal(err)
	}
	est, err := db.AuditBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var scanned int64
	if err := db.r.QueryRowContext(ctx, `SELECT sum(`+auditRowBytes+`) FROM audit`).Scan(&scanned); err != nil || est != scanned {
		t.Fatalf("estimate %d, scan %d (%v); want equal", est, scanned, err)
	}
	// An outcome and a folded refusal move the estimate with the rows.
	if err := db.WriteAudits(ctx, []AuditWrite{{ID: ws[0].ID, Entry: AuditEntry{Action: "POST /v1/jobs", Result: "403 no"}},
		{ID: ws[1].ID, Delete: true}}); err != nil {
		t.Fatal(err)
	}
	if err := db.r.QueryRowContext(ctx, `SELECT sum(`+auditRowBytes+`) FROM audit`).Scan(&scanned); err != nil {
		t.Fatal(err)
	}
	if est, _ = db.AuditBytes(ctx); est-scanned > 200 || scanned-est > 200 {
		t.Errorf("estimate %d after an outcome and a delete, scan %d; want within 200 bytes", est, scanned)
	}

	// By age: the first 1000 minutes go.
	n, err := db.PruneAudit(ctx, t0.Add(1000*time.Minute), 0)
	if err != nil || n != 999 { // one of them was folded away above
		t.Fatalf("pruned %d by age (%v); want 999", n, err)
	}
	// By size: down to about a third.
	est, _ = db.AuditBytes(ctx)
	if _, err := db.PruneAudit(ctx, time.Time{}, est/3); err != nil {
		t.Fatal(err)
	}
	after, _ := db.AuditBytes(ctx)
	left, _ := db.AuditLog(ctx, AuditFilter{})
	if after > est/3 || after < est/3-2000 || left[0].Time.Before(t0.Add(2000*time.Minute)) {
		t.Errorf("after pruning to %d bytes: %d bytes, %d rows from %s; want the newest rows only, just under the bound", est/3, after, len(left), left[0].Time)
	}

	// The file stops growing: write and prune as much again, repeatedly.
	// The database's size in pages (what the file is once checkpointed);
	// its WAL is reused from the start at each automatic checkpoint
	// (1000 pages), so it stays under about 4 MiB.
	size := func() int64 {
		var pages, pageSize int64
		if err := db.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if err := db.w.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
			t.Fatal(err)
		}
		return pages * pageSize
	}
	bound := after
	var first int64
	for round := range 10 {
		var more []AuditWrite
		for i := range 500 {
			more = append(more, AuditWrite{Entry: AuditEntry{Time: t0.Add(time.Duration(5000+round*500+i) * time.Minute), ActorName: "mallory",
				Origin: "10.0.0.9", Action: "refused before authentication (bad_token)", Result: fmt.Sprintf("401 %d %s", i, strings.Repeat("y", 100))}})
		}
		if err := db.WriteAudits(ctx, more); err != nil {
			t.Fatal(err)
		}
		if _, err := db.PruneAudit(ctx, time.Time{}, bound); err != nil {
			t.Fatal(err)
		}
		if round == 2 {
			first = size()
		}
	}
	if grown := size() - first; grown > 256<<10 {
		t.Errorf("accounting.db grew %d KiB over 7 rounds of writing and pruning as much; want under 256 KiB", grown>>10)
	}
	if fi, err := os.Stat(db.path + "-wal"); err == nil && fi.Size() > 5<<20 {
		t.Errorf("accounting.db-wal is %d KiB; want under 5 MiB (automatic checkpoints)", fi.Size()>>10)
	}
}

// TestCarriedAuditCopiedOnce: an entry carried into state.db is copied
// with its number; copied again after a crash (Recovered) it adds no
// second row, and the write still learns the row's ID.
func TestCarriedAuditCopiedOnce(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	e := AuditEntry{Time: time.Unix(1000, 0), ActorName: "alice", Origin: "unix", Action: "POST /v1/jobs", Target: "job 7", Result: "200 ok"}
	first := []AuditWrite{{Entry: e, Carried: 41}, {Entry: e, Carried: 42}}
	if err := db.WriteAudits(ctx, first); err != nil {
		t.Fatal(err)
	}
	e.Result, e.Target = "in progress", ""
	again := []AuditWrite{{Entry: e, Carried: 42, Recovered: true}, {Entry: e, Carried: 43, Recovered: true}}
	if err := db.WriteAudits(ctx, again); err != nil {
		t.Fatal(err)
	}
	if again[0].ID != first[1].ID || again[1].ID == 0 || again[1].ID == first[1].ID {
		t.Errorf("IDs %d, %d after the second copy; want %d (the row already there) and a new one", again[0].ID, again[1].ID, first[1].ID)
	}
	got, err := db.AuditLog(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Result != "200 ok" || got[2].Result != "in progress" {
		t.Fatalf("audit log %+v; want 3 rows: 41 and 42 complete, 43 in progress", got)
	}
}
