package jobs

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestKill9DuringSubmissionBurst kills the controller (the whole
// standalone tree) in the middle of a burst of submissions from 8 clients:
// every submission that was acknowledged must be there after a restart on
// the same state dir, with the id it was given, and no id twice. And no
// job without its audit entry: each submission's entry is committed with
// its job in state.db (naming it) and copied to the audit log after the
// answer, so a kill between the two leaves it to the restart to copy,
// once: every job there has an entry naming it (or, for a call that wrote
// its entry first, one of the calls the kill left "in progress"), and no
// job is named twice.
func TestKill9DuringSubmissionBurst(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 0)
	work := t.TempDir()
	cl := c.Client()
	js := spec.JobSpec{Name: "burst", Script: "#!/bin/sh\ntrue\n", WorkDir: work, SubmitDir: work, Requeue: true}

	var mu sync.Mutex
	acked := map[spec.JobID]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
				if err != nil {
					return // the controller died under us: stop this client
				}
				mu.Lock()
				if acked[resp.ID] {
					t.Errorf("id %d acknowledged twice", resp.ID)
				}
				acked[resp.ID] = true
				mu.Unlock()
			}
		})
	}
	// Kill once a thousand are in, while the clients keep going.
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 1000 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("fewer than 1000 submissions acknowledged in a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Stop(9)
	killStrayDaemons(t, c.Dir)
	wg.Wait()
	cancel()

	c.Start(0)
	jobs, err := c.Client().Jobs(context.Background(), api.JobFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	have := map[spec.JobID]int{}
	for _, j := range jobs {
		have[j.ID]++
	}
	for id, n := range have {
		if n != 1 {
			t.Errorf("job %d listed %d times after the restart", id, n)
		}
	}
	lost := 0
	for id := range acked {
		if have[id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged job %d is gone after kill -9", id)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged jobs lost", lost, len(acked))
	}
	t.Logf("%d acknowledged before kill -9, all present after restart (%d jobs in all: some were committed but not yet acknowledged)", len(acked), len(have))

	entries, err := c.Client().Audit(context.Background(), api.AuditFilter{Action: "POST /v1/jobs"})
	if err != nil {
		t.Fatal(err)
	}
	// An entry the kill left "in progress" names its job too when it was
	// committed with it; one written first (the audit log's own path)
	// names none.
	named, inProgress, keptInProgress := map[string]int{}, 0, 0
	for _, e := range entries {
		switch {
		case e.Result == "in progress" && e.Target == "":
			inProgress++
		case e.Result == "in progress":
			keptInProgress++
			named[e.Target]++
		case e.Result == "200 ok":
			named[e.Target]++
		}
	}
	unnamed := 0
	for id := range have {
		switch n := named["job "+strconv.FormatUint(uint64(id), 10)]; {
		case n > 1:
			t.Errorf("job %d's submission is in the audit log %d times", id, n)
		case n == 0:
			unnamed++
		}
	}
	if unnamed > inProgress {
		t.Fatalf("%d of %d jobs have no audit entry naming them and only %d calls read \"in progress\": %d jobs without their audit entry after kill -9",
			unnamed, len(have), inProgress, unnamed-inProgress)
	}
	t.Logf("audit log after the restart: %d jobs named (%d by entries the kill left in progress, copied from state.db at the restart), %d other calls in progress, for %d jobs",
		len(named), keptInProgress, inProgress, len(have))

	// New submissions never reuse an id.
	resp, err := c.Client().Submit(context.Background(), api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	if have[resp.ID] > 0 {
		t.Fatalf("new submission got id %d, which was already in use", resp.ID)
	}
}
