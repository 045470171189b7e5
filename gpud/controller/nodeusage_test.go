package controller

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNodeSpeaksOnlyForItsAllocations (hole 9): n1 reporting the exit or
// a checkpoint of a job running on n2, or of a job that does not exist,
// changes nothing and is logged as refused; usage verdicts allow only
// the node of the attempt, send earlier attempts to accounting and
// refuse the rest.
func TestNodeSpeaksOnlyForItsAllocations(t *testing.T) {
	var logs syncBuf
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	h.register("n1", 1)
	h.register("n2", 1)
	id := h.submit(alice, func(js *spec.JobSpec) { js.Resources.NodeList = []string{"n2"} })
	j := h.job(id)
	if j.State != spec.StateRunning || j.Alloc == nil || j.Alloc.Nodes[0].Node != "n2" {
		t.Fatalf("job %d: %s on %+v; want RUNNING on n2", id, j.State, j.Alloc)
	}
	ctx := context.Background()
	evs := []NodeEvent{
		{Seq: 1, AllocID: j.Alloc.ID, JobID: id, Kind: EventExited, State: spec.StateFailed, ExitCode: 1},
		{Seq: 2, AllocID: j.Alloc.ID, JobID: id, Kind: EventCheckpointed, CkptSeq: 7, CkptBytes: 1},
		{Seq: 3, AllocID: "999.1", JobID: 999, Kind: EventExited, State: spec.StateFailed},
	}
	if acked, err := h.c.NodeEvents(ctx, root, "n1", evs); err != nil || acked != 3 {
		t.Fatalf("NodeEvents from n1 = %d, %v; want all acknowledged", acked, err)
	}
	if j := h.job(id); j.State != spec.StateRunning || j.LastCheckpoint.Seq != 0 {
		t.Errorf("job on n2 after n1's events: %s, checkpoint %+v; want RUNNING, none", j.State, j.LastCheckpoint)
	}
	for _, want := range []string{"node event for a job not allocated to this node refused", "node event for a job that does not exist refused"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	refs := []UsageRef{{id, 1}, {id, 2}, {id, 0}, {999, 1}}
	for node, want := range map[string][]UsageVerdict{
		"n2": {UsageAllowed, UsageRefused, UsageRefused, UsageRefused},
		"n1": {UsageRefused, UsageRefused, UsageRefused, UsageRefused},
	} {
		got, err := h.c.UsageFromNode(ctx, node, refs)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("UsageFromNode(%s) = %v, %v; want %v", node, got, err, want)
		}
	}
	// Requeued: attempt 1 is history (accounting knows its nodes).
	if _, err := h.c.JobAction(ctx, root, id, ActionRequeue, ""); err != nil {
		t.Fatal(err)
	}
	h.exit("n2", j, spec.StateRequeued, 143)
	got, err := h.c.UsageFromNode(ctx, "n1", []UsageRef{{id, 1}, {id, 3}})
	if err != nil || !slices.Equal(got, []UsageVerdict{UsageAskHistory, UsageRefused}) {
		t.Errorf("after requeue: %v, %v; want [ask-history refused]", got, err)
	}
}

// TestSecretEnvDropped (hole 7): the controller drops credentials and
// the site's secret variables from a submission whatever the client
// sent, and from a job an older gpud stored with them.
func TestSecretEnvDropped(t *testing.T) {
	store := newFakeStore()
	store.jobs[1] = spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "old", Script: "#!/bin/sh\n", WorkDir: "/tmp",
		Env: []string{"PATH=/bin", "GPUD_TOKEN=old-token"}}, User: "alice", UID: 1000, State: spec.StatePending}
	store.next = 2
	h := newHarnessAt(t, store, func(c *Config) { c.SecretEnv = []string{"AWS_*"} }, t0)
	if env := h.job(1).Env; !slices.Equal(env, []string{"PATH=/bin"}) {
		t.Errorf("loaded job's env = %q; want GPUD_TOKEN dropped", env)
	}
	id := h.submit(alice, func(js *spec.JobSpec) {
		js.Env = []string{"PATH=/bin", "GPUD_TOKEN=t", "AWS_SECRET_ACCESS_KEY=k", "AWS_REGION=r", "X=1"}
	})
	if env := h.job(id).Env; !slices.Equal(env, []string{"PATH=/bin", "X=1"}) {
		t.Errorf("submitted job's env = %q; want PATH and X only", env)
	}
}
