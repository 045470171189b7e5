package sched

import (
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func TestFractionPlacement(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	gpu := func(u string, free bool, ff float64) GPU {
		return GPU{UUID: u, Model: "h100", Free: free, FreeFraction: ff}
	}
	job := func(id spec.JobID, f float64) Job {
		return Job{ID: id, Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUFraction: f}}
	}
	for _, tc := range []struct {
		name string
		gpus []GPU
		jobs []Job
		want map[spec.JobID]string // "" = pending
	}{
		{"idle GPU", []GPU{gpu("a", true, 1)}, []Job{job(1, 0.5)}, map[spec.JobID]string{1: "a"}},
		{"most used that fits", []GPU{gpu("a", true, 1), gpu("b", false, 0.5), gpu("c", false, 0.25)},
			[]Job{job(1, 0.25)}, map[spec.JobID]string{1: "c"}},
		{"too little left", []GPU{gpu("a", false, 0.25), gpu("b", true, 1)}, []Job{job(1, 0.5)}, map[spec.JobID]string{1: "b"}},
		{"held whole", []GPU{gpu("a", false, 0)}, []Job{job(1, 0.1)}, map[spec.JobID]string{1: ""}},
		{"MIG GPU", []GPU{{UUID: "a", Model: "h100", Free: true, FreeFraction: 1, MIGEnabled: true}}, []Job{job(1, 0.5)},
			map[spec.JobID]string{1: ""}},
		{"whole job skips a shared GPU", []GPU{gpu("a", false, 0.5), gpu("b", true, 1)},
			[]Job{{ID: 1, Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: 1}}}, map[spec.JobID]string{1: "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &Snapshot{Nodes: []Node{{Name: "n1", State: spec.NodeIdle, CPUs: 8, FreeCPUs: 8, MemMiB: 100, FreeMemMiB: 100, GPUs: tc.gpus}},
				Jobs: tc.jobs}
			plan := Schedule(snap, now, Config{})
			if err := VerifyPlan(snap, now, Config{}, plan); err != nil {
				t.Fatal(err)
			}
			got := map[spec.JobID]string{}
			for _, j := range tc.jobs {
				got[j.ID] = ""
			}
			for _, s := range plan.Starts {
				got[s.JobID] = s.Nodes[0].GPUs[0]
			}
			for id, w := range tc.want {
				if got[id] != w {
					t.Errorf("job %d on %q, want %q", id, got[id], w)
				}
			}
		})
	}
}

func TestVerifyCatchesOverShare(t *testing.T) {
	snap := &Snapshot{Nodes: []Node{{Name: "n1", State: spec.NodeIdle, CPUs: 8, FreeCPUs: 8, MemMiB: 100, FreeMemMiB: 100,
		GPUs: []GPU{{UUID: "a", Free: false, FreeFraction: 0.5}}}},
		Jobs: []Job{{ID: 1, Req: spec.Resources{Nodes: 1, GPUFraction: 0.75}}}}
	plan := Plan{Starts: []Start{{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "n1", GPUs: []string{"a"}, GPUFraction: 0.75}}}}}
	if err := Verify(snap, plan); err == nil || !strings.Contains(err.Error(), "over-shared") {
		t.Errorf("Verify = %v, want over-shared", err)
	}
}
