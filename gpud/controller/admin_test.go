package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func (s *fakeStore) LoadAdmin(context.Context) ([]spec.AdminRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []spec.AdminRecord
	for _, k := range sortedKeys(s.admin) {
		out = append(out, s.admin[k])
	}
	return out, nil
}

func (s *fakeStore) ApplyAdmin(_ context.Context, recs []spec.AdminRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		s.admin = map[string]spec.AdminRecord{}
	}
	for _, r := range recs {
		if r.Data == nil {
			delete(s.admin, r.Kind+"/"+r.Name)
		} else {
			s.admin[r.Kind+"/"+r.Name] = r
		}
	}
	return nil
}

func nodeNamed(t *testing.T, c *Controller, name string) spec.Node {
	t.Helper()
	ns, err := c.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return spec.Node{}
}

func TestUpdateNodesStates(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	ctx := context.Background()
	h.register("n1", 1)
	h.register("n2", 1)
	run := h.submit(alice, func(j *spec.JobSpec) {
		j.Resources.GPUsPerNode = 1
		j.Resources.Nodes = 1
		j.Requeue = true
		j.TimeLimit = spec.Duration(time.Hour)
	})
	if j := h.job(run); j.State != spec.StateRunning {
		t.Fatalf("job = %s, want RUNNING", j.State)
	}
	onNode := h.job(run).Alloc.Nodes[0].Node

	// Refusals: all problems at once, nothing changed.
	_, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{"n1"}, State: "DRAIN"})
	if err == nil || !strings.Contains(err.Error(), "You must specify a reason when DOWNING or DRAINING a node") {
		t.Fatalf("DRAIN without reason: %v", err)
	}
	_, err = h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{"n1", "n9"}, State: "DRAIN", Reason: "psu"})
	if !errors.Is(err, spec.ErrNotFound) || !strings.Contains(err.Error(), "Invalid node name specified: n9") {
		t.Fatalf("unknown node: %v", err)
	}
	if n := nodeNamed(t, h.c, "n1"); n.State == spec.NodeDrain {
		t.Fatal("a refused update drained n1")
	}
	if _, err := h.c.UpdateNodes(ctx, alice, spec.NodeUpdate{Nodes: []string{"n1"}, State: "DRAIN", Reason: "x"}); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("alice drains: %v", err)
	}
	if _, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{"n1"}, State: "BOGUS", Reason: "x"}); err == nil || !strings.Contains(err.Error(), "Invalid node state specified") {
		t.Fatalf("bad state: %v", err)
	}

	// DRAIN, then RESUME, of both.
	if _, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{"n1", "n2"}, State: "drain", Reason: "PSU"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"n1", "n2"} {
		n := nodeNamed(t, h.c, name)
		if (n.State != spec.NodeDrain && n.State != spec.NodeDraining) || n.Reason != "PSU" {
			t.Fatalf("%s after DRAIN = %s %q", name, n.State, n.Reason)
		}
	}
	if _, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{"n1", "n2"}, State: "RESUME"}); err != nil {
		t.Fatal(err)
	}
	// DOWN ends the running job's part (requeued) and holds through a
	// re-registration, until RESUME.
	if _, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{onNode}, State: "DOWN", Reason: "cable"}); err != nil {
		t.Fatal(err)
	}
	if j := h.job(run); j.State == spec.StateRunning && j.Alloc.Nodes[0].Node == onNode {
		t.Fatalf("job still running on %s after DOWN", onNode)
	}
	h.register(onNode, 1)
	if n := nodeNamed(t, h.c, onNode); n.State != spec.NodeDown || n.Reason != "cable" {
		t.Fatalf("%s re-registered after DOWN = %s %q, want DOWN cable", onNode, n.State, n.Reason)
	}
	// FAIL is shown as FAIL; Weight and Features are kept.
	w := 5
	fs := []string{"ib", "nvl"}
	if _, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{onNode}, State: "FAIL", Reason: "fan", Weight: &w, Features: &fs}); err != nil {
		t.Fatal(err)
	}
	if n := nodeNamed(t, h.c, onNode); (n.State != spec.NodeFail && n.State != spec.NodeFailing) || n.Weight != 5 || !slices.Equal(n.Features, fs) {
		t.Fatalf("after FAIL = %s weight %d features %v", n.State, n.Weight, n.Features)
	}
	// Durable: a controller on the same store sees it.
	h.stop()
	h2 := newHarness(t, store, nil)
	if n := nodeNamed(t, h2.c, onNode); (n.State != spec.NodeFail && n.State != spec.NodeFailing) || n.Weight != 5 || !slices.Equal(n.Features, fs) {
		t.Fatalf("after restart = %s weight %d features %v", n.State, n.Weight, n.Features)
	}
	if _, err := h2.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{onNode}, State: "RESUME"}); err != nil {
		t.Fatal(err)
	}
	if n := nodeNamed(t, h2.c, onNode); n.State != spec.NodeIdle && n.State != spec.NodeMixed && n.State != spec.NodeAllocated {
		t.Fatalf("after RESUME = %s", n.State)
	}
}

func TestUpdatePartitionLiveDifference(t *testing.T) {
	store := newFakeStore()
	cfgFn := func(c *Config) {
		c.Partitions = []Partition{{Name: "gpu", Default: true, MaxTime: 2 * time.Hour}, {Name: "debug", MaxTime: 30 * time.Minute}}
	}
	h := newHarness(t, store, cfgFn)
	ctx := context.Background()
	h.register("n1", 1)
	down := "down"
	diffs, err := h.c.UpdatePartition(ctx, root, spec.PartitionUpdate{Name: "gpu", State: &down})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || !strings.Contains(diffs[0], "PartitionName=gpu State=DOWN (the configuration file says State=UP)") {
		t.Fatalf("diffs = %q", diffs)
	}
	// A job submitted now waits: the partition starts nothing.
	id := h.submit(alice, func(j *spec.JobSpec) { j.Partition = "gpu" })
	if j := h.job(id); j.State != spec.StatePending {
		t.Fatalf("job in a DOWN partition = %s, want PENDING", j.State)
	}
	// Default moves; MaxTime changes; both reported.
	yes := true
	mt := spec.Duration(4 * time.Hour)
	if _, err := h.c.UpdatePartition(ctx, root, spec.PartitionUpdate{Name: "debug", Default: &yes, MaxTime: &mt}); err != nil {
		t.Fatal(err)
	}
	ps, _ := h.c.Partitions(ctx, root)
	if !ps[1].Default || ps[0].Default || ps[1].MaxTime != 4*time.Hour || ps[0].State != PartitionDown {
		t.Fatalf("partitions = %+v", ps)
	}
	// Durable, and a reload keeps it and reports it.
	h.stop()
	h2 := newHarness(t, store, cfgFn)
	ps, _ = h2.c.Partitions(ctx, root)
	if ps[0].State != PartitionDown || !ps[1].Default {
		t.Fatalf("after restart partitions = %+v", ps)
	}
	cfg := DefaultConfig()
	cfgFn(&cfg)
	msg, err := h2.c.ApplyConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "PartitionName=gpu State=DOWN") || !strings.Contains(msg, "PartitionName=debug MaxTime=4h0m0s Default=YES") {
		t.Fatalf("reload message = %q", msg)
	}
	// Back to the file's value: no difference left, the job starts.
	up := "UP"
	no := true
	diffs, err = h2.c.UpdatePartition(ctx, root, spec.PartitionUpdate{Name: "gpu", State: &up, Default: &no})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(diffs, func(d string) bool { return strings.Contains(d, "gpu") || strings.Contains(d, "Default") }) {
		t.Fatalf("diffs after setting back = %q", diffs)
	}
	if j := h2.job(id); j.State != spec.StateRunning {
		t.Fatalf("job after State=UP = %s, want RUNNING", j.State)
	}
	if _, err := h2.c.UpdatePartition(ctx, root, spec.PartitionUpdate{Name: "nope", State: &up}); !errors.Is(err, spec.ErrNotFound) || !strings.Contains(err.Error(), "Invalid partition name specified") {
		t.Fatalf("unknown partition: %v", err)
	}
}

func TestTopOrdersOwnJobsOnly(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	h.register("n1", 1)
	// One GPU: the first job runs, the others queue in submission order.
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Resources.Nodes = 1 }
	first := h.submit(alice, gpu)
	a1 := h.submit(alice, gpu)
	b1 := h.submit(bob, gpu)
	a2 := h.submit(alice, gpu)
	if j := h.job(first); j.State != spec.StateRunning {
		t.Fatalf("first = %s", j.State)
	}
	if _, err := h.c.JobAction(ctx, bob, a2, ActionTop, ""); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("bob tops alice's job: %v", err)
	}
	if _, err := h.c.JobAction(ctx, alice, a2, ActionTop, ""); err != nil {
		t.Fatal(err)
	}
	p1, p2, pb := h.job(a1).Priority, h.job(a2).Priority, h.job(b1).Priority
	if p2 <= p1 {
		t.Fatalf("after top: a2 priority %d, a1 %d; want a2 above", p2, p1)
	}
	if p2 > pb+1 {
		t.Fatalf("after top: a2 priority %d passes bob's %d by more than alice already had", p2, pb)
	}
	// The next to start is a2.
	h.exit("n1", h.job(first), spec.StateCompleted, 0)
	if j := h.job(a2); j.State != spec.StateRunning {
		t.Fatalf("a2 after the first ended = %s; a1 %s", j.State, h.job(a1).State)
	}
	if _, err := h.c.JobAction(ctx, alice, a2, ActionTop, ""); !errors.Is(err, spec.ErrConflict) {
		t.Fatalf("top of a running job: %v", err)
	}
}

func TestWeightOrdersEqualNodes(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	h.register("n1", 1)
	h.register("n2", 1)
	w := 10
	if _, err := h.c.UpdateNodes(ctx, root, spec.NodeUpdate{Nodes: []string{"n1"}, Weight: &w}); err != nil {
		t.Fatal(err)
	}
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Resources.Nodes = 1 })
	if j := h.job(id); j.State != spec.StateRunning || j.Nodes[0] != "n2" {
		t.Fatalf("job = %s on %v; want RUNNING on n2, the lighter node", j.State, j.Nodes)
	}
}

// TestNotify: scontrol notify keeps the latest messages for the running
// job's allocation (the newest spec.MaxNotices, numbered), sent to its
// nodes with the job; the owner and root may, others not; a pending, an
// ended or an srun/salloc job is refused in Slurm's words.
func TestNotify(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, fullCyclesOnly) // see fullCyclesOnly
	ctx := context.Background()
	h.register("n1", 1)
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Resources.Nodes = 1 }
	run := h.submit(alice, gpu)
	wait := h.submit(alice, gpu)
	if j := h.job(run); j.State != spec.StateRunning {
		t.Fatalf("job = %s", j.State)
	}
	if _, err := h.c.JobAction(ctx, bob, run, ActionNotify, "hi"); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("bob notifies alice's job: %v", err)
	}
	if _, err := h.c.JobAction(ctx, alice, run, ActionNotify, ""); !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("notify without a message: %v", err)
	}
	if _, err := h.c.JobAction(ctx, alice, wait, ActionNotify, "hi"); !errors.Is(err, spec.ErrConflict) || !strings.Contains(err.Error(), "presently disabled") {
		t.Fatalf("notify of a pending job: %v", err)
	}
	for i := range spec.MaxNotices + 2 {
		who := alice
		if i%2 == 1 {
			who = root
		}
		if _, err := h.c.JobAction(ctx, who, run, ActionNotify, fmt.Sprintf("message %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	j := h.job(run)
	if j.NoticeSeq != spec.MaxNotices+2 || len(j.Notices) != spec.MaxNotices {
		t.Fatalf("NoticeSeq %d, %d notices; want %d and the newest %d", j.NoticeSeq, len(j.Notices), spec.MaxNotices+2, spec.MaxNotices)
	}
	first, last := j.Notices[0], j.Notices[len(j.Notices)-1]
	if first.Seq != 3 || first.Message != "message 3" || last.Seq != spec.MaxNotices+2 || last.AllocID != j.Alloc.ID || last.By != "root" {
		t.Fatalf("notices = %+v", j.Notices)
	}
	var sent []spec.JobNotice
	for _, a := range h.assignments("n1") {
		if a.Job.ID == run {
			sent = a.Job.Notices
		}
	}
	if len(sent) != spec.MaxNotices || sent[len(sent)-1].Seq != last.Seq {
		t.Fatalf("the node's assignment carries notices %+v", sent)
	}
	h.exit("n1", j, spec.StateCompleted, 0)
	h.settle() // the freed GPU goes to the second job (a paced cycle, under load)
	if _, err := h.c.JobAction(ctx, alice, run, ActionNotify, "too late"); !errors.Is(err, spec.ErrConflict) || !strings.Contains(err.Error(), "already completing or completed") {
		t.Fatalf("notify of an ended job: %v", err)
	}
	if _, err := h.c.JobAction(ctx, alice, wait, ActionNotify, "now running"); err != nil {
		t.Fatalf("notify of the second job once it runs: %v (state %s)", err, h.job(wait).State)
	}
	h.exit("n1", h.job(wait), spec.StateCompleted, 0)
	salloc := h.submit(alice, func(j *spec.JobSpec) { gpu(j); j.Interactive = true })
	if j := h.job(salloc); j.State != spec.StateRunning {
		t.Fatalf("salloc allocation = %s", j.State)
	}
	if _, err := h.c.JobAction(ctx, alice, salloc, ActionNotify, "hi"); !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "batch job") {
		t.Fatalf("notify of an salloc allocation: %v (state %s)", err, h.job(salloc).State)
	}
}
