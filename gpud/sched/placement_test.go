package sched_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// pnode is a node of n GPUs of which those in held are taken whole.
func pnode(name string, n int, held ...int) sched.Node {
	nd := sched.Node{Name: name, State: spec.NodeMixed, Partitions: []string{"batch"}, CPUs: 64, FreeCPUs: 64,
		MemMiB: 1 << 20, FreeMemMiB: 1 << 20}
	for k := range n {
		nd.GPUs = append(nd.GPUs, sched.GPU{UUID: fmt.Sprintf("%s-%d", name, k), Model: "h100", Free: !slices.Contains(held, k), FreeFraction: 1})
	}
	if len(held) > 0 {
		nd.Allocs = 1
	}
	return nd
}

func pjob(id spec.JobID, nodes, gpus int) sched.Job {
	return sched.Job{ID: id, Partition: "batch", Req: spec.Resources{Nodes: nodes, CPUsPerNode: 1, GPUsPerNode: gpus}}
}

// placed returns the nodes and GPU indexes of job id's start, or fails.
func placed(t *testing.T, plan sched.Plan, id spec.JobID) (nodes []string, gpus []string) {
	t.Helper()
	for _, s := range plan.Starts {
		if s.JobID == id {
			for _, a := range s.Nodes {
				nodes = append(nodes, a.Node)
				for _, u := range a.GPUs {
					gpus = append(gpus, u[strings.LastIndexByte(u, '-')+1:])
				}
			}
			return nodes, gpus
		}
	}
	t.Fatalf("job %d did not start: %+v", id, plan.Pending)
	return nil, nil
}

func TestPlacementPolicies(t *testing.T) {
	t.Parallel()
	// a: 8 free; b: 2 free; c: 4 free.
	nodes := []sched.Node{pnode("a", 8), pnode("b", 8, 0, 1, 2, 3, 4, 5), pnode("c", 8, 0, 1, 2, 3)}
	for _, tc := range []struct {
		pol          sched.Placement
		job          sched.Job
		want         string
		config, part sched.Placement
	}{
		{pol: sched.PlacePack, job: pjob(1, 1, 2), want: "b"},
		{pol: sched.PlacePack, job: pjob(1, 1, 3), want: "c"},
		{pol: sched.PlacePack, job: pjob(1, 1, 0), want: "b"}, // CPU-only: keep GPU nodes whole
		{pol: sched.PlacePack, job: pjob(1, 2, 2), want: "b,c"},
		{pol: sched.PlaceSpread, job: pjob(1, 1, 2), want: "a"},
		{pol: sched.PlaceSpread, job: pjob(1, 2, 2), want: "a,c"},
		{pol: sched.PlaceFirstFit, job: pjob(1, 1, 2), want: "a"},
		{pol: "", job: pjob(1, 1, 2), want: "b"},                                       // default is pack
		{pol: sched.PlaceSpread, part: sched.PlacePack, job: pjob(1, 1, 2), want: "b"}, // partition wins
	} {
		name := fmt.Sprintf("%s/part=%s/%dx%d", tc.pol, tc.part, tc.job.Req.Nodes, tc.job.Req.GPUsPerNode)
		t.Run(name, func(t *testing.T) {
			snap := &sched.Snapshot{Nodes: nodes, Jobs: []sched.Job{tc.job}, Partitions: []sched.Partition{{Name: "batch", Placement: tc.part}}}
			cfg := sched.Config{Placement: tc.pol}
			plan := sched.Schedule(snap, bt0, cfg)
			if err := sched.VerifyPlan(snap, bt0, cfg, plan); err != nil {
				t.Fatal(err)
			}
			got, _ := placed(t, plan, 1)
			if strings.Join(got, ",") != tc.want {
				t.Errorf("placed on %v, want %s", got, tc.want)
			}
		})
	}
}

// Pack fills nodes one after another: a stream of 1-GPU jobs leaves
// whole nodes free, spread leaves none.
func TestPlacementPackKeepsNodesWhole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pol       sched.Placement
		wholeFree int
	}{{sched.PlacePack, 2}, {sched.PlaceSpread, 0}} {
		snap := &sched.Snapshot{Nodes: []sched.Node{pnode("a", 8), pnode("b", 8), pnode("c", 8), pnode("d", 8)}}
		for i := range 12 {
			snap.Jobs = append(snap.Jobs, pjob(spec.JobID(i+1), 1, 1))
		}
		plan := sched.Schedule(snap, bt0, sched.Config{Placement: tc.pol})
		used := map[string]int{}
		for _, s := range plan.Starts {
			used[s.Nodes[0].Node]++
		}
		whole := 4 - len(used)
		if len(plan.Starts) != 12 || whole != tc.wholeFree {
			t.Errorf("%s: %d starts, %d whole nodes free (%v); want 12 and %d", tc.pol, len(plan.Starts), whole, used, tc.wholeFree)
		}
	}
}

func TestPlacementTopology(t *testing.T) {
	t.Parallel()
	// 8 GPUs: NVLink groups {0-3} and {4-7}; GPUs 0, 1 and 4 are held.
	nvl := pnode("n", 8, 0, 1, 4)
	for k := range nvl.GPUs {
		nvl.GPUs[k].NVLinkGroup = 1 + k/4
		nvl.GPUs[k].NUMANode = k / 4
	}
	// No NVLink; NUMA 0 = {0-3}, NUMA 1 = {4-7}; GPUs 0, 1, 2, 4 held.
	numa := pnode("n", 8, 0, 1, 2, 4)
	for k := range numa.GPUs {
		numa.GPUs[k].NUMANode = k / 4
	}
	for _, tc := range []struct {
		name string
		node sched.Node
		gpus int
		want string
	}{
		{"nvlink 3 GPUs in the group with room", nvl, 3, "5,6,7"},
		{"nvlink 2 GPUs best-fit group", nvl, 2, "2,3"},
		{"nvlink 1 GPU in the fuller group", nvl, 1, "2"},
		{"nvlink 4 GPUs span groups", nvl, 4, "2,3,5,6"},
		{"numa 2 GPUs in one NUMA node", numa, 2, "5,6"},
		{"numa 3 GPUs in one NUMA node", numa, 3, "5,6,7"},
		{"numa 4 GPUs span NUMA nodes", numa, 4, "3,5,6,7"},
	} {
		for _, pol := range []sched.Placement{sched.PlacePack, sched.PlaceFirstFit} {
			snap := &sched.Snapshot{Nodes: []sched.Node{tc.node}, Jobs: []sched.Job{pjob(1, 1, tc.gpus)}}
			plan := sched.Schedule(snap, bt0, sched.Config{Placement: pol})
			if _, got := placed(t, plan, 1); strings.Join(got, ",") != tc.want {
				t.Errorf("%s (%s): GPUs %v, want %s", tc.name, pol, got, tc.want)
			}
		}
	}
}

// FGD weighs the workload: it keeps CPUs next to free GPUs that the
// workload's jobs need (where pack takes the node with fewer free GPUs),
// and it puts a share where the GPUs left stay usable for the workload's
// shares (where pack fills the fullest GPU).
func TestPlacementFGD(t *testing.T) {
	t.Parallel()
	t.Run("cpu", func(t *testing.T) {
		x := pnode("x", 4, 0, 1)
		x.FreeCPUs = 10
		y := pnode("y", 4, 0)
		work := []sched.Demand{{GPUs: 1, CPUs: 4, Weight: 1}}
		job := pjob(1, 1, 1)
		job.Req.CPUsPerNode = 8
		for pol, want := range map[sched.Placement]string{sched.PlacePack: "x", sched.PlaceFGD: "y"} {
			snap := &sched.Snapshot{Nodes: []sched.Node{x, y}, Jobs: []sched.Job{job}, Workload: work}
			if got, _ := placed(t, sched.Schedule(snap, bt0, sched.Config{Placement: pol}), 1); got[0] != want {
				t.Errorf("%s: on %s, want %s", pol, got[0], want)
			}
		}
	})
	t.Run("share", func(t *testing.T) {
		n := pnode("n", 2, 0)
		n.GPUs[0].FreeFraction = 0.7 // 0.3 used by a sharer
		job := sched.Job{ID: 1, Partition: "batch", Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUFraction: 0.3}}
		for pol, want := range map[sched.Placement]string{sched.PlacePack: "0", sched.PlaceFGD: "1"} {
			snap := &sched.Snapshot{Nodes: []sched.Node{n}, Jobs: []sched.Job{job}, Workload: []sched.Demand{{GPUs: 1, Fraction: 0.6, CPUs: 1, Weight: 1}}}
			cfg := sched.Config{Placement: pol}
			plan := sched.Schedule(snap, bt0, cfg)
			if err := sched.VerifyPlan(snap, bt0, cfg, plan); err != nil {
				t.Fatal(err)
			}
			if _, got := placed(t, plan, 1); got[0] != want {
				t.Errorf("%s: share on GPU %s, want %s", pol, got[0], want)
			}
		}
	})
	t.Run("workload from the queue", func(t *testing.T) {
		// Without Snapshot.Workload the pending jobs are the mix: the
		// 8-CPU job goes to y, so x keeps the CPUs its two free GPUs need
		// for the 4-CPU jobs queued behind it (pack would strand one).
		x := pnode("x", 4, 0, 1)
		x.FreeCPUs = 10
		y := pnode("y", 4, 0)
		big := pjob(1, 1, 1)
		big.Req.CPUsPerNode, big.Priority = 8, 10
		snap := &sched.Snapshot{Nodes: []sched.Node{x, y}, Jobs: []sched.Job{big}}
		for i := range 5 {
			j := pjob(spec.JobID(i+2), 1, 1)
			j.Req.CPUsPerNode = 4
			snap.Jobs = append(snap.Jobs, j)
		}
		plan := sched.Schedule(snap, bt0, sched.Config{Placement: sched.PlaceFGD})
		if got, _ := placed(t, plan, 1); got[0] != "y" {
			t.Errorf("big job on %s, want y", got[0])
		}
		if len(plan.Starts) != 5 {
			t.Errorf("%d starts, want 5 (all 5 GPUs used)", len(plan.Starts))
		}
	})
}

func TestParsePlacement(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "pack", "spread", "first-fit", "fgd"} {
		if _, err := sched.ParsePlacement(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	_, err := sched.ParsePlacement("bestfit")
	if err == nil || !strings.Contains(err.Error(), `"bestfit" is not a placement`) || !strings.Contains(err.Error(), `"spread"`) {
		t.Errorf("bestfit: %v", err)
	}
}

// Node lists, exclusions, constraints and --exclusive filter before any
// placement ranks: pack would take b (2 free) every time.
func TestPlacementHonoursFilters(t *testing.T) {
	t.Parallel()
	a, b, c := pnode("a", 8), pnode("b", 8, 0, 1, 2, 3, 4, 5), pnode("c", 8, 0, 1, 2, 3)
	a.Features = []string{"ib"}
	for _, tc := range []struct {
		name string
		mod  func(*spec.Resources)
		want string
	}{
		{"none", func(*spec.Resources) {}, "b"},
		{"nodelist", func(r *spec.Resources) { r.NodeList = []string{"a", "c"} }, "c"},
		{"exclude", func(r *spec.Resources) { r.Exclude = []string{"b"} }, "c"},
		{"constraint", func(r *spec.Resources) { r.Constraint = "ib" }, "a"},
		{"exclusive", func(r *spec.Resources) { r.Exclusive = true }, "a"},
	} {
		for _, pol := range []sched.Placement{sched.PlacePack, sched.PlaceFGD} {
			j := pjob(1, 1, 2)
			tc.mod(&j.Req)
			snap := &sched.Snapshot{Nodes: []sched.Node{a, b, c}, Jobs: []sched.Job{j}}
			cfg := sched.Config{Placement: pol}
			plan := sched.Schedule(snap, bt0, cfg)
			if err := sched.VerifyPlan(snap, bt0, cfg, plan); err != nil {
				t.Fatal(err)
			}
			if got, _ := placed(t, plan, 1); got[0] != tc.want {
				t.Errorf("%s (%s): on %s, want %s", tc.name, pol, got[0], tc.want)
			}
		}
	}
}
