package sched

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// h100Profiles is a DGX H100 GPU's MIG profile table, as the go-nvml mock
// reports it (memory-slice placements).
func h100Profiles() []spec.MIGProfile {
	pl := func(size int, starts ...int) []spec.MIGPlacement {
		var out []spec.MIGPlacement
		for _, s := range starts {
			out = append(out, spec.MIGPlacement{Start: s, Size: size})
		}
		return out
	}
	return []spec.MIGProfile{
		{Name: "1g.10gb", Slices: 1, MemMiB: 10240, MaxCount: 7, Placements: pl(1, 0, 1, 2, 3, 4, 5, 6)},
		{Name: "2g.20gb", Slices: 2, MemMiB: 20480, MaxCount: 3, Placements: pl(2, 0, 2, 4)},
		{Name: "3g.40gb", Slices: 3, MemMiB: 40960, MaxCount: 2, Placements: pl(3, 0, 4)},
		{Name: "4g.40gb", Slices: 4, MemMiB: 40960, MaxCount: 1, Placements: pl(4, 0)},
		{Name: "7g.80gb", Slices: 7, MemMiB: 81920, MaxCount: 1, Placements: pl(7, 0)},
	}
}

// migNode is a node with n empty H100s in MIG mode.
func migNode(name string, n int, dynamic bool) Node {
	nd := Node{Name: name, State: spec.NodeIdle, CPUs: 64, FreeCPUs: 64, MemMiB: 1 << 20, FreeMemMiB: 1 << 20}
	for k := range n {
		nd.GPUs = append(nd.GPUs, GPU{UUID: fmt.Sprintf("%s-g%d", name, k), Model: "h100", Free: true, FreeFraction: 1,
			MIGEnabled: true, MIG: &MIGGPU{Dynamic: dynamic, Profiles: h100Profiles()}})
	}
	return nd
}

// staticNode is a node with one static MIG H100 holding two 3g.40gb
// instances, the first (MIG-a, at 0) marked with health (when not "").
func staticNode(name, health string) Node {
	nd := migNode(name, 1, false)
	g := name + "-g0"
	nd.GPUs[0].MIG.Slices = []spec.MIGSlice{
		{GPU: g, Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: 0, Size: 3}, UUID: "MIG-a", Health: health},
		{GPU: g, Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: 4, Size: 3}, UUID: "MIG-b"},
	}
	return nd
}

func migJob(id spec.JobID, profile string, n int) Job {
	return Job{ID: id, SubmitTime: time.Unix(int64(id), 0), Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: n, GPUProfile: profile}}
}

func wholeJob(id spec.JobID, n int) Job {
	return Job{ID: id, SubmitTime: time.Unix(int64(id), 0), Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: n}}
}

// scheduleOK runs a cycle and fails the test if the plan breaks an
// invariant.
func scheduleOK(t *testing.T, snap *Snapshot) Plan {
	t.Helper()
	now := time.Unix(1000, 0)
	plan := Schedule(snap, now, Config{})
	if err := VerifyPlan(snap, now, Config{}, plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// slicesOf renders each started job's slices as "gpu@start+size".
func slicesOf(plan Plan) map[spec.JobID]string {
	out := map[spec.JobID]string{}
	for _, s := range plan.Starts {
		var parts []string
		for _, a := range s.Nodes {
			for _, m := range a.MIG {
				parts = append(parts, fmt.Sprintf("%s@%d+%d", m.GPU, m.Placement.Start, m.Placement.Size))
			}
			parts = append(parts, a.GPUs...)
		}
		out[s.JobID] = strings.Join(parts, ",")
	}
	return out
}

func TestMIGPlacement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []Node
		jobs  []Job
		// want is the slices (or, without "@", just the GPU) by job;
		// absent: pending.
		want map[spec.JobID]string
	}{
		{"two slices of one job on one GPU", []Node{migNode("n1", 2, true)}, []Job{migJob(1, "1g.10gb", 2)},
			// Small instances go to the top placements first, keeping the
			// low ones (4g, 3g, 2g at 0) open.
			map[spec.JobID]string{1: "n1-g0@6+1,n1-g0@4+1"}},
		{"seven one-slice jobs pack one GPU, the eighth opens the next", []Node{migNode("n1", 8, true)},
			[]Job{migJob(1, "1g.10gb", 1), migJob(2, "1g.10gb", 1), migJob(3, "1g.10gb", 1), migJob(4, "1g.10gb", 1),
				migJob(5, "1g.10gb", 1), migJob(6, "1g.10gb", 1), migJob(7, "1g.10gb", 1), migJob(8, "1g.10gb", 1)},
			map[spec.JobID]string{1: "n1-g0", 2: "n1-g0", 3: "n1-g0", 4: "n1-g0", 5: "n1-g0", 6: "n1-g0", 7: "n1-g0", 8: "n1-g1"}},
		{"3g leaves room for 4g on the same GPU", []Node{migNode("n1", 2, true)},
			[]Job{migJob(1, "3g.40gb", 1), migJob(2, "4g.40gb", 1)},
			map[spec.JobID]string{1: "n1-g0@4+3", 2: "n1-g0@0+4"}},
		{"instance count limit", []Node{migNode("n1", 1, true)},
			[]Job{migJob(1, "4g.40gb", 1), migJob(2, "4g.40gb", 1)},
			map[spec.JobID]string{1: "n1-g0@0+4"}},
		{"static GPU without instances offers nothing", []Node{migNode("n1", 1, false)}, []Job{migJob(1, "1g.10gb", 1)},
			map[spec.JobID]string{}},
		{"whole job takes an empty dynamic MIG GPU, then slices go elsewhere", []Node{migNode("n1", 2, true)},
			[]Job{wholeJob(1, 1), migJob(2, "1g.10gb", 1)},
			map[spec.JobID]string{1: "n1-g0", 2: "n1-g1"}},
		{"slices first keep their GPU from a whole job", []Node{migNode("n1", 2, true)},
			[]Job{migJob(1, "1g.10gb", 1), wholeJob(2, 2), wholeJob(3, 1)},
			map[spec.JobID]string{1: "n1-g0", 3: "n1-g1"}},
		{"static GPU is never whole", []Node{migNode("n1", 1, false)}, []Job{wholeJob(1, 1)}, map[spec.JobID]string{}},
		{"gang of two nodes", []Node{migNode("n1", 1, true), migNode("n2", 1, true)},
			[]Job{{ID: 1, Req: spec.Resources{Nodes: 2, CPUsPerNode: 1, GPUsPerNode: 1, GPUProfile: "7g.80gb"}}},
			map[spec.JobID]string{1: "n1-g0@0+7,n2-g0@0+7"}},
		{"unknown profile waits", []Node{migNode("n1", 1, true)}, []Job{migJob(1, "5g.60gb", 1)}, map[spec.JobID]string{}},
		// A MIG instance out of service (a fault NVML attributed to it)
		// takes no job; its GPU's other instance does.
		{"an instance out of service takes no job", []Node{staticNode("n1", "gpud:xid94 gpu0 XID 94 on MIG-a")},
			[]Job{migJob(1, "3g.40gb", 1), migJob(2, "3g.40gb", 1)}, map[spec.JobID]string{1: "n1-g0@4+3"}},
		{"both instances in service", []Node{staticNode("n1", "")},
			[]Job{migJob(1, "3g.40gb", 1), migJob(2, "3g.40gb", 1)}, map[spec.JobID]string{1: "n1-g0@0+3", 2: "n1-g0@4+3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := scheduleOK(t, &Snapshot{Nodes: tc.nodes, Jobs: tc.jobs})
			got := slicesOf(plan)
			for id, w := range tc.want {
				if !sameSlices(got[id], w) {
					t.Errorf("job %d got %q, want %q", id, got[id], w)
				}
			}
			for id, g := range got {
				if _, ok := tc.want[id]; !ok {
					t.Errorf("job %d started on %q, want pending", id, g)
				}
			}
			for _, p := range plan.Pending {
				if p.Reason == "" || p.Detail == "" {
					t.Errorf("job %d pending without reason or detail: %+v", p.JobID, p)
				}
			}
		})
	}
}

func TestMIGLayoutFromSnapshot(t *testing.T) {
	n := migNode("n1", 1, true)
	// A running job holds 1g at slice 0; an idle 3g instance sits at 4.
	n.GPUs[0].Free = false
	n.GPUs[0].MIG.Slices = []spec.MIGSlice{
		{GPU: "n1-g0", Profile: "1g.10gb", Placement: spec.MIGPlacement{Start: 0, Size: 1}, UUID: "MIG-a", Job: 99},
		{GPU: "n1-g0", Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: 4, Size: 3}, UUID: "MIG-b"},
	}
	plan := scheduleOK(t, &Snapshot{Nodes: []Node{n}, Jobs: []Job{migJob(1, "3g.40gb", 1), migJob(2, "4g.40gb", 1),
		migJob(3, "2g.20gb", 1), migJob(4, "1g.10gb", 2)}})
	got := slicesOf(plan)
	// 3g reuses the idle instance; 4g overlaps the held 1g; 2g fits at 2;
	// two more 1g do not fit (only slice 1 is left).
	want := map[spec.JobID]string{1: "n1-g0@4+3", 3: "n1-g0@2+2"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("job %d got %q, want %q", id, got[id], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("starts %v, want %v", got, want)
	}
	for _, s := range plan.Starts {
		if s.JobID == 1 && s.Nodes[0].MIG[0].UUID != "MIG-b" {
			t.Errorf("3g job did not reuse the idle instance: %+v", s.Nodes[0].MIG)
		}
	}
}

func TestVerifyCatchesMIGOverlap(t *testing.T) {
	snap := &Snapshot{Nodes: []Node{migNode("n1", 1, true)}, Jobs: []Job{migJob(1, "3g.40gb", 1), migJob(2, "4g.40gb", 1)}}
	bad := Plan{Starts: []Start{
		{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1, MIG: []spec.MIGSlice{{GPU: "n1-g0", Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: 0, Size: 3}}}}}},
		{JobID: 2, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1, MIG: []spec.MIGSlice{{GPU: "n1-g0", Profile: "4g.40gb", Placement: spec.MIGPlacement{Start: 0, Size: 4}}}}}},
	}}
	err := Verify(snap, bad)
	if err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("Verify = %v, want an overlap error", err)
	}
	bad.Starts[1].Nodes[0].MIG[0].Placement = spec.MIGPlacement{Start: 1, Size: 4}
	if err := Verify(snap, bad); err == nil || !strings.Contains(err.Error(), "not one of profile") {
		t.Fatalf("Verify = %v, want a placement error", err)
	}
}

// sameSlices compares slicesOf output with want, where a want without
// "@" only names the GPU every slice must be on.
func sameSlices(got, want string) bool {
	if got == want || strings.Contains(want, "@") || got == "" {
		return got == want
	}
	for _, p := range strings.Split(got, ",") {
		if g, _, _ := strings.Cut(p, "@"); g != want {
			return false
		}
	}
	return true
}
