package sched

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpud/gpud/gpud/spec"
)

// TestMIGPlansAlwaysVerify draws small clusters mixing plain, static and
// dynamic MIG GPUs with random layouts (idle and held instances, GPUs held
// whole) and queues mixing whole-GPU and MIG jobs; every plan must pass
// VerifyPlan: no slice overlaps an instance or another slice, none lands on
// a GPU held whole, no whole GPU is given while it carries slices.
func TestMIGPlansAlwaysVerify(t *testing.T) {
	profiles := h100Profiles()
	rapid.Check(t, func(t *rapid.T) {
		snap := &Snapshot{}
		var instance int
		for n := range rapid.IntRange(1, 3).Draw(t, "nodes") {
			nd := Node{Name: fmt.Sprintf("n%d", n), State: spec.NodeIdle, CPUs: 64, FreeCPUs: 64, MemMiB: 1 << 20, FreeMemMiB: 1 << 20}
			for k := range rapid.IntRange(1, 4).Draw(t, "gpus") {
				g := GPU{UUID: fmt.Sprintf("n%d-g%d", n, k), Model: "h100", Free: true, FreeFraction: 1}
				switch rapid.IntRange(0, 2).Draw(t, "kind") {
				case 0: // plain
					if rapid.Bool().Draw(t, "heldWhole") {
						g.Free, g.FreeFraction = false, 0
					}
				default:
					g.MIGEnabled = true
					g.MIG = &MIGGPU{Dynamic: rapid.Bool().Draw(t, "dynamic"), Profiles: profiles}
					var used uint64
					for range rapid.IntRange(0, 4).Draw(t, "instances") {
						p := profiles[rapid.IntRange(0, len(profiles)-1).Draw(t, "profile")]
						pl := p.Placements[rapid.IntRange(0, len(p.Placements)-1).Draw(t, "placement")]
						if used&placementMask(pl) != 0 {
							continue
						}
						used |= placementMask(pl)
						instance++
						s := spec.MIGSlice{GPU: g.UUID, Profile: p.Name, Placement: pl, UUID: fmt.Sprintf("MIG-%d", instance)}
						if rapid.Bool().Draw(t, "held") {
							s.Job = spec.JobID(1000 + instance)
							g.Free, g.FreeFraction = false, 0
						}
						g.MIG.Slices = append(g.MIG.Slices, s)
					}
					if len(g.MIG.Slices) == 0 && g.MIG.Dynamic && rapid.IntRange(0, 3).Draw(t, "wholeJob") == 0 {
						g.Free, g.FreeFraction = false, 0 // an empty dynamic GPU held whole
					}
				}
				nd.GPUs = append(nd.GPUs, g)
			}
			snap.Nodes = append(snap.Nodes, nd)
		}
		for id := range rapid.IntRange(1, 25).Draw(t, "jobs") {
			j := Job{ID: spec.JobID(id + 1), SubmitTime: time.Unix(int64(id), 0),
				Req: spec.Resources{Nodes: rapid.IntRange(1, 2).Draw(t, "jobNodes"), CPUsPerNode: 1}}
			if rapid.Bool().Draw(t, "mig") {
				j.Req.GPUProfile = profiles[rapid.IntRange(0, len(profiles)-1).Draw(t, "jobProfile")].Name
				j.Req.GPUsPerNode = rapid.IntRange(1, 3).Draw(t, "slices")
			} else {
				j.Req.GPUsPerNode = rapid.IntRange(0, 2).Draw(t, "whole")
			}
			snap.Jobs = append(snap.Jobs, j)
		}
		now := time.Unix(1000, 0)
		plan := Schedule(snap, now, Config{})
		if err := VerifyPlan(snap, now, Config{}, plan); err != nil {
			t.Fatal(err)
		}
	})
}
