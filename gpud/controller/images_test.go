package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// TestPullNotesSpeakForOwnJobs: a node's report of a job's image pull is
// shown on the job while it runs, only from a node of the job's
// allocation (a prefetch only from a node asked to prefetch it), and is
// cleared when the node stops reporting it or the job starts; the start
// records what the pull cost on the job's part.
func TestPullNotesSpeakForOwnJobs(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	h.register("n2", 2)
	ctx := context.Background()
	img := func(j *spec.JobSpec) { j.Resources.GPUsPerNode, j.Image = 2, "reg.site/app:1" }
	id := h.submit(alice, img)
	j := h.job(id)
	if j.State != spec.StateRunning || len(j.Alloc.Nodes) != 1 {
		t.Fatalf("job = %s on %v, want RUNNING on one node", j.State, j.Nodes)
	}
	on := j.Alloc.Nodes[0].Node
	other := map[string]string{"n1": "n2", "n2": "n1"}[on]
	report := func(node string, pulls ...PullNote) {
		t.Helper()
		if _, err := h.c.NodeImages(ctx, root, node, nil, pulls); err != nil {
			t.Fatal(err)
		}
	}
	report(other, PullNote{Job: id, Done: 1, Total: 10})
	if p := h.job(id).ImagePull; p != nil {
		t.Fatalf("a node outside the job's allocation set its pull: %+v", p)
	}
	report(on, PullNote{Job: id, Done: 1, Total: 10, Prefetch: true})
	if p := h.job(id).ImagePull; p != nil {
		t.Fatalf("a prefetch nobody asked for was shown: %+v", p)
	}
	report(on, PullNote{Job: id, Done: 4, Total: 10})
	if p := h.job(id).ImagePull; p == nil || *p != (spec.ImagePull{Node: on, Done: 4, Total: 10}) || p.Percent() != 40 {
		t.Fatalf("ImagePull = %+v, want 4 of 10 bytes on %s", p, on)
	}
	report(on) // the pull ended
	if p := h.job(id).ImagePull; p != nil {
		t.Fatalf("ImagePull = %+v after the node stopped reporting it", p)
	}
	report(on, PullNote{Job: id, Done: 9, Total: 10})
	_, err := h.c.NodeEvents(ctx, root, on, []NodeEvent{{Seq: 1, AllocID: j.Alloc.ID, JobID: id, Kind: EventStarted,
		Time: t0, PullMS: 1500, PullBytes: 12345}})
	if err != nil {
		t.Fatal(err)
	}
	got := h.job(id)
	if got.ImagePull != nil {
		t.Errorf("ImagePull = %+v after the job started", got.ImagePull)
	}
	if p := got.Alloc.Nodes[0]; p.PullMS != 1500 || p.PullBytes != 12345 {
		t.Errorf("part on %s: PullMS %d, PullBytes %d; want 1500, 12345", on, p.PullMS, p.PullBytes)
	}
	// The view read before the event shares its Alloc with the owner's
	// copy then (newView): the event must not have changed it in place.
	if p := j.Alloc.Nodes[0]; p.PullMS != 0 || p.PullBytes != 0 {
		t.Errorf("a view published before the started event shows PullMS %d, PullBytes %d; want it unchanged (0, 0)", p.PullMS, p.PullBytes)
	}
}

// TestInventoryReachesTheScheduler: a node's inventory is what the
// scheduler's snapshot holds for it, the version is answered so the node
// sends it only when it changes, and the job's image is named as the
// nodes name it.
func TestInventoryReachesTheScheduler(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	ctx := context.Background()
	v, err := h.c.NodeImages(ctx, root, "n1", nil, nil)
	if err != nil || v != "" {
		t.Fatalf("version before any inventory = %q, %v; want \"\"", v, err)
	}
	if _, err := h.c.NodeImages(ctx, alice, "n1", &NodeImages{Version: "x"}, nil); err == nil {
		t.Fatal("a user's image report was taken")
	}
	v, err = h.c.NodeImages(ctx, root, "n1", &NodeImages{Version: "v1", Images: []string{"docker.io/library/ubuntu:22.04"}}, nil)
	if err != nil || v != "v1" {
		t.Fatalf("version = %q, %v; want v1", v, err)
	}
	if v, _ := h.c.NodeImages(ctx, root, "n1", nil, nil); v != "v1" {
		t.Fatalf("version after an unchanged report = %q, want v1", v)
	}
	var snap *sched.Snapshot
	var sj sched.Job
	err = h.c.query(ctx, func() error {
		snap = h.c.snapshot(t0.Add(time.Second))
		sj = h.c.schedJob(&spec.Job{JobSpec: spec.JobSpec{Image: "ubuntu:22.04"}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Nodes) != 1 || !snap.Nodes[0].Images["docker.io/library/ubuntu:22.04"] {
		t.Fatalf("snapshot node images = %v, want the reported inventory", snap.Nodes[0].Images)
	}
	if sj.Image != "docker.io/library/ubuntu:22.04" {
		t.Errorf("sched job image = %q, want the node's name for it", sj.Image)
	}
	nodes, err := h.c.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].CachedImages != 1 {
		t.Errorf("node view CachedImages = %+v, %v; want 1", nodes, err)
	}
}

// TestInventoryReachesIncrementalCycles: an inventory that arrives after
// the full cycle whose State answers submissions incrementally is the one
// that places the next job of its image, without a new full cycle.
func TestInventoryReachesIncrementalCycles(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, alwaysIncremental)
	h.register("n1", 2)
	h.register("n2", 2)
	ctx := context.Background()
	a := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	full := h.fullCycles()
	if _, err := h.c.NodeImages(ctx, root, "n2", &NodeImages{Version: "v1", Images: []string{"reg.site/app:1"}}, nil); err != nil {
		t.Fatal(err)
	}
	h.exit(h.job(a).Alloc.Nodes[0].Node, h.job(a), spec.StateCompleted, 0)
	b := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode, j.Image = 2, "reg.site/app:1" })
	if n := h.fullCycles(); n != full {
		t.Fatalf("%d full cycles for a job end and a submission, want 0 (the test is about incremental cycles)", n-full)
	}
	if j := h.job(b); j.State != spec.StateRunning || j.Alloc.Nodes[0].Node != "n2" {
		t.Fatalf("job %d = %s on %v, want RUNNING on n2 (its image's node, reported after the full cycle)", b, j.State, j.Nodes)
	}
}
