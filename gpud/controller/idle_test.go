package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// sample is a usage sample of job j's current attempt over the ten
// minutes ending at t0+endMin, with its busiest GPU at util percent.
func sample(j spec.Job, endMin int, util float64) UsageSeen {
	end := t0.Add(time.Duration(endMin) * time.Minute)
	return UsageSeen{JobID: j.ID, Attempt: j.Attempt, Start: end.Add(-10 * time.Minute), End: end, GPUs: 1, GPUUtilMax: util}
}

func (h *harness) observe(node string, s ...UsageSeen) {
	h.t.Helper()
	if err := h.c.ObserveUsage(context.Background(), node, s); err != nil {
		h.t.Fatal(err)
	}
}

func TestIdlePolicyFlagsAndClears(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions[0].Idle = IdlePolicy{GPUUtil: 5, After: 30 * time.Minute, Action: IdleFlag}
	})
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	if j.State != spec.StateRunning {
		t.Fatalf("job is %s, want RUNNING", j.State)
	}
	h.observe("n1", sample(j, 10, 2), sample(j, 20, 4.9))
	if got := h.job(id).IdleGPU; got != "" {
		t.Fatalf("after 20 idle minutes IdleGPU = %q; want none before 30", got)
	}
	// Samples that say nothing (no GPU readings, another attempt, a repeat)
	// neither flag nor reset.
	noGPU := sample(j, 30, 0)
	noGPU.GPUs = 0
	old := sample(j, 30, 90)
	old.Attempt = j.Attempt - 1
	h.observe("n1", noGPU, old, sample(j, 20, 90))
	if got := h.job(id).IdleGPU; got != "" {
		t.Fatalf("IdleGPU = %q after samples that carry no news", got)
	}
	h.observe("n1", sample(j, 30, 1))
	if got, want := h.job(id).IdleGPU, "below 5% for 30 min"; got != want {
		t.Fatalf("after 30 idle minutes IdleGPU = %q, want %q", got, want)
	}
	if got := h.job(id).State; got != spec.StateRunning {
		t.Errorf("flag-only policy changed the job's state to %s", got)
	}
	h.observe("n1", sample(j, 40, 60))
	if got := h.job(id).IdleGPU; got != "" {
		t.Errorf("IdleGPU = %q after a busy sample; want it cleared", got)
	}
	// A new low run starts from scratch.
	h.observe("n1", sample(j, 50, 0), sample(j, 60, 0))
	if got := h.job(id).IdleGPU; got != "" {
		t.Errorf("IdleGPU = %q after 20 new idle minutes; want none", got)
	}
}

func TestIdlePolicyNeedsEveryNodeIdle(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions[0].Idle = IdlePolicy{GPUUtil: 5, After: 20 * time.Minute, Action: IdleFlag}
	})
	h.register("n1", 1)
	h.register("n2", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode, j.Resources.Nodes = 1, 2 })
	j := h.job(id)
	if len(j.Nodes) != 2 {
		t.Fatalf("job runs on %v; want two nodes", j.Nodes)
	}
	h.observe("n1", sample(j, 10, 0), sample(j, 20, 0), sample(j, 30, 0))
	h.observe("n2", sample(j, 10, 80), sample(j, 20, 0))
	if got := h.job(id).IdleGPU; got != "" {
		t.Fatalf("IdleGPU = %q while n2 was idle only 10 minutes", got)
	}
	h.observe("n2", sample(j, 30, 0))
	if got := h.job(id).IdleGPU; got == "" {
		t.Fatal("job not flagged once both nodes were idle 20 minutes")
	}
}

func TestIdlePolicyQOSCancelsAndHooksOnce(t *testing.T) {
	hooks := make(chan IdleEvent, 4)
	run := func(ctx context.Context, ev IdleEvent) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("hook context has no deadline")
		}
		hooks <- ev
		return nil
	}
	h := newHarnessAt(t, newFakeStore(), func(c *Config) {
		c.Partitions[0].Idle = IdlePolicy{GPUUtil: 5, After: 30 * time.Minute, Action: IdleFlag}
		c.QOS = append(c.QOS, QOS{Name: "short", Idle: IdlePolicy{GPUUtil: 10, After: 20 * time.Minute, Action: IdleCancel,
			Hook: []string{"/usr/local/bin/notify", "--idle"}}})
	}, t0, WithIdleHook(run))
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode, j.QOS = 1, "short" })
	j := h.job(id)
	h.observe("n1", sample(j, 10, 9), sample(j, 20, 9), sample(j, 30, 9))
	got := h.job(id)
	want := "idle GPUs: below 10% for 20 min"
	if got.State != spec.StateCompleting || got.StopState != spec.StateCancelled || got.StopReason != want {
		t.Fatalf("job %s stop %s %q; want COMPLETING, stop CANCELLED %q", got.State, got.StopState, got.StopReason, want)
	}
	// The node reports the end with the stop reason it was given.
	if _, err := h.c.NodeEvents(context.Background(), root, "n1", []NodeEvent{{Seq: 1, AllocID: got.Alloc.ID, JobID: id,
		Kind: EventExited, State: spec.StateCancelled, Reason: got.StopReason}}); err != nil {
		t.Fatal(err)
	}
	got = h.job(id)
	if got.State != spec.StateCancelled || !strings.Contains(got.Reason, want) {
		t.Errorf("job ended %s (%q); want CANCELLED with %q", got.State, got.Reason, want)
	}
	select {
	case ev := <-hooks:
		wantEv := IdleEvent{Hook: []string{"/usr/local/bin/notify", "--idle"}, JobID: id, User: "alice", Reason: want}
		if diff := cmp.Diff(wantEv, ev); diff != "" {
			t.Errorf("hook event (-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("idle hook did not run")
	}
	h.observe("n1", sample(j, 40, 0))
	h.stop() // hooks are queued at commit; stopping waits for the hook loop
	if len(hooks) != 0 {
		t.Errorf("hook ran %d more times; want once per job", len(hooks))
	}
}

func TestStatsFairshareFactors(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Accounts = []Account{{Name: "lab", Shares: 1, Users: []string{"alice", "bob"}}}
		c.DefaultAccount = "lab"
	})
	h.register("n1", 2)
	h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 2 })
	h.settle()
	h.advance(time.Hour)
	s, err := h.c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Fairshare) != 2 || s.FairshareDropped != 0 {
		t.Fatalf("fairshare factors %+v (dropped %d); want alice and bob in lab", s.Fairshare, s.FairshareDropped)
	}
	f := map[string]float64{}
	for _, r := range s.Fairshare {
		if r.Account != "lab" {
			t.Errorf("factor row %+v; want account lab", r)
		}
		f[r.User] = r.Factor
	}
	// alice has used GPUs for an hour, bob nothing: bob ranks first.
	if !(f["bob"] > f["alice"]) {
		t.Errorf("factors %v; want bob's above alice's", f)
	}
}

// BenchmarkObserveUsage is the idle-GPU policy's cost on the owner: 1,000
// nodes × 8 one-GPU jobs under a policy, each node posting one sample per
// job per op (one events request per node, as the server hands them on).
// ns/op is per node request of 8 samples.
//
//	go test -run '^$' -bench ObserveUsage ./gpud/controller/
func BenchmarkObserveUsage(b *testing.B) {
	const nodes, perNode = 1000, 8
	store := newFakeStore()
	store.discard = true
	h := newHarnessAt(b, store, func(c *Config) {
		c.Partitions[0].Idle = IdlePolicy{GPUUtil: 5, After: 24 * time.Hour, Action: IdleFlag}
	}, t0)
	ctx := context.Background()
	for i := range nodes {
		h.register(fmt.Sprintf("n%04d", i), perNode)
	}
	for range nodes / 100 * perNode {
		js := spec.JobSpec{Name: "j", Script: "x", WorkDir: "/tmp", Array: "0-99", Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1}}
		if _, err := h.c.SubmitAll(ctx, alice, js); err != nil {
			b.Fatal(err)
		}
	}
	h.settle()
	byNode := map[string][]UsageSeen{}
	jobs, err := h.c.ListJobs(ctx, JobFilter{})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range jobs {
		j := v.Job()
		if j.State == spec.StateRunning {
			byNode[j.Nodes[0]] = append(byNode[j.Nodes[0]], UsageSeen{JobID: j.ID, Attempt: j.Attempt, GPUs: 1, GPUUtilMax: 1})
		}
	}
	if len(byNode) != nodes {
		b.Fatalf("%d nodes run jobs, want %d", len(byNode), nodes)
	}
	names := make([]string, 0, nodes)
	for n := range byNode {
		names = append(names, n)
	}
	for i := 0; b.Loop(); i++ {
		n := names[i%nodes]
		end := t0.Add(time.Duration(i+1) * time.Second)
		s := byNode[n]
		for k := range s {
			s[k].Start, s[k].End = end.Add(-time.Second), end
		}
		if err := h.c.ObserveUsage(ctx, n, s); err != nil {
			b.Fatal(err)
		}
	}
}
