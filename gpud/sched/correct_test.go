package sched

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// A State planned from a snapshot that events overtook (the controller's
// full cycle off its loop, while the last State answered the events) and
// then corrected — its starts that no longer hold retracted, the ends
// since released, the starts made meanwhile taken — holds exactly what
// is free in truth, and never over-allocates afterwards.
func TestStateCorrectionsKeepTruth(t *testing.T) {
	t.Parallel()
	const nodes, gpus, cpus = 3, 4, 16
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		limits := []time.Duration{10 * time.Minute, time.Hour, 2 * time.Hour}
		info := map[spec.JobID]Job{}
		pending := map[spec.JobID]bool{}
		held := map[spec.JobID][]spec.NodeAlloc{}
		startAt := map[spec.JobID]time.Time{}
		used := map[string]bool{}
		usedCPUs := map[string]int{}
		next := spec.JobID(0)
		newJob := func(at time.Time) Job {
			next++
			j := job(next, 1+r.IntN(4), []int{1, 2, 4}[r.IntN(3)], func(j *Job) {
				j.TimeLimit, j.SubmitTime = limits[r.IntN(3)], at
				if r.IntN(6) == 0 {
					j.Req.Nodes = 2
				}
			})
			info[j.ID], pending[j.ID] = j, true
			return j
		}
		snapshot := func() *Snapshot {
			s := &Snapshot{}
			for i := range nodes {
				n := node(fmt.Sprintf("n%d", i), cpus, 100000, "h100", gpus)
				for k := range n.GPUs {
					n.GPUs[k].Free = !used[n.GPUs[k].UUID]
				}
				n.FreeCPUs -= usedCPUs[n.Name]
				s.Nodes = append(s.Nodes, n)
			}
			for _, id := range slices.Sorted(maps.Keys(held)) {
				for _, na := range held[id] {
					s.Nodes[int(na.Node[1]-'0')].Allocs++
				}
				s.Running = append(s.Running, RunningJob{ID: id, Start: startAt[id], TimeLimit: info[id].TimeLimit, Nodes: held[id]})
			}
			for _, id := range slices.Sorted(maps.Keys(pending)) {
				s.Jobs = append(s.Jobs, info[id])
			}
			return s
		}
		fits := func(s Start) bool {
			for _, na := range s.Nodes {
				for _, g := range na.GPUs {
					if used[g] {
						return false
					}
				}
				if usedCPUs[na.Node]+na.CPUs > cpus {
					return false
				}
			}
			return pending[s.JobID]
		}
		var now time.Time
		take := func(p Plan) (ids []spec.JobID) {
			for _, s := range p.Starts {
				if !fits(s) {
					t.Fatalf("seed %d: job %d started on %+v: not pending, or over-allocated", seed, s.JobID, s.Nodes)
				}
				for _, na := range s.Nodes {
					for _, g := range na.GPUs {
						used[g] = true
					}
					usedCPUs[na.Node] += na.CPUs
				}
				delete(pending, s.JobID)
				held[s.JobID], startAt[s.JobID] = s.Nodes, now
				ids = append(ids, s.JobID)
			}
			return ids
		}
		end := func(id spec.JobID) {
			for _, na := range held[id] {
				for _, g := range na.GPUs {
					delete(used, g)
				}
				usedCPUs[na.Node] -= na.CPUs
			}
			delete(held, id)
		}
		truth := func(st *State, when string) {
			for i, w := range st.c.nodes {
				var free uint64
				for k := range gpus {
					if !used[fmt.Sprintf("GPU-n%d-%d", i, k)] {
						free |= 1 << k
					}
				}
				if w.phys.GPUs != free || w.phys.CPUs != cpus-usedCPUs[w.n.Name] {
					t.Fatalf("seed %d, %s: node n%d free GPUs %04b CPUs %d in the State, %04b and %d in truth",
						seed, when, i, w.phys.GPUs, w.phys.CPUs, free, cpus-usedCPUs[w.n.Name])
				}
			}
		}
		// events answers n events through st: ends, submissions, resumes.
		events := func(st *State, n int) (ended, started, submitted []spec.JobID) {
			for range n {
				now = now.Add(time.Duration(r.IntN(90)) * time.Second)
				switch op := r.IntN(3); {
				case op == 0 && len(held) > 0:
					ids := slices.Sorted(maps.Keys(held))
					id := ids[r.IntN(len(ids))]
					end(id)
					ended = append(ended, id)
					started = append(started, take(st.End(id, now))...)
				case op == 1:
					j := newJob(now)
					submitted = append(submitted, j.ID)
					started = append(started, take(st.Submit(j, now))...)
				default:
					if st.Capped() {
						p, _ := st.Resume(now)
						started = append(started, take(p)...)
					}
				}
			}
			return ended, started, submitted
		}
		cfg := Config{MaxStartsPerCycle: 3, BackfillDepth: 4}
		for range 12 {
			newJob(t0)
		}
		now = t0.Add(time.Second)
		cur, plan := NewState(snapshot(), now, cfg)
		take(plan)
		for round := range 10 {
			// A full cycle planned from the snapshot now, while cur
			// answers what comes meanwhile.
			nb, nplan := NewState(snapshot(), now, cfg)
			ended, started, submitted := events(cur, r.IntN(10))
			// Land: the plan's starts that still hold, in order.
			var retracted int
			for _, s := range nplan.Starts {
				if fits(s) {
					take(Plan{Starts: []Start{s}})
					continue
				}
				if !nb.Retract(s.JobID) {
					t.Fatalf("seed %d round %d: Retract(%d) refused", seed, round, s.JobID)
				}
				retracted++
			}
			for _, id := range ended {
				nb.Release(id)
			}
			for _, id := range started {
				if a := held[id]; a != nil {
					if !nb.Taken(info[id], a, now) {
						t.Fatalf("seed %d round %d: Taken(%d) refused, held %+v; plan %+v started %v ended %v", seed, round, id, a, nplan.Starts, started, ended)
					}
				} else {
					nb.Gone(id) // started and ended meanwhile
				}
			}
			take(nb.Offer(now))
			truth(nb, fmt.Sprintf("round %d landed (%d retracted, %d ended, %d started meanwhile)", round, retracted, len(ended), len(started)))
			for _, id := range submitted {
				if pending[id] {
					take(nb.Submit(info[id], now))
				}
			}
			cur = nb
			events(cur, r.IntN(10))
			truth(cur, fmt.Sprintf("round %d, events after landing", round))
		}
	}
}
