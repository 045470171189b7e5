package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// baseWorld is a caller of Base as the simulator is one: it owns the
// nodes and the running jobs, changes them as jobs start and end, and
// tells the Base.
type baseWorld struct {
	rng     *rand.Rand
	nodes   []Node
	running []RunningJob
	base    *Base
	now     time.Time
	nextID  spec.JobID
}

func newBaseWorld(seed uint64) *baseWorld {
	w := &baseWorld{rng: rand.New(rand.NewPCG(seed, 7)), now: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), nextID: 1}
	// Names out of weight and name order, GPUs of 4 to 10 (a node
	// past 8 GPUs), an unhealthy GPU, NVLink groups on some nodes.
	for i := range 14 {
		name := fmt.Sprintf("n%02d", (i*5)%14)
		n := Node{Name: name, State: spec.NodeIdle, CPUs: 64, FreeCPUs: 64, MemMiB: 1 << 19, FreeMemMiB: 1 << 19,
			Weight: w.rng.IntN(3), Partitions: []string{"gpu"}}
		for k := range []int{4, 8, 8, 10}[i%4] {
			g := GPU{UUID: fmt.Sprintf("%s-g%d", name, k), Model: "h100", Free: true, FreeFraction: 1, NUMANode: k / 4}
			if i%3 == 0 {
				g.NVLinkGroup = 1 + k/2
			}
			n.GPUs = append(n.GPUs, g)
		}
		if i%5 == 2 {
			n.GPUs[1].Unhealthy = true
		}
		w.nodes = append(w.nodes, n)
	}
	w.base = NewBase(w.nodes)
	return w
}

// start places a job of 1–2 nodes on free GPUs (or a half share of
// one), as a cycle's start would.
func (w *baseWorld) start() {
	r := RunningJob{ID: w.nextID, Start: w.now, QOS: []string{"normal", "low"}[w.rng.IntN(2)], User: "u", Account: "a"}
	w.nextID++
	if w.rng.IntN(4) > 0 {
		r.TimeLimit = time.Duration(1+w.rng.IntN(120)) * time.Minute
		if w.rng.IntN(20) == 0 {
			r.TimeLimit = 150 * 365 * 24 * time.Hour // an end past 2150: Sub's way
		}
	}
	frac := w.rng.IntN(4) == 0
	for range 1 + w.rng.IntN(2) {
		ni := w.rng.IntN(len(w.nodes))
		n := &w.nodes[ni]
		if slices.ContainsFunc(r.Nodes, func(a spec.NodeAlloc) bool { return a.Node == n.Name }) {
			continue
		}
		a := spec.NodeAlloc{Node: n.Name, CPUs: 1 + w.rng.IntN(4), MemMiB: int64(1+w.rng.IntN(8)) << 10}
		if n.FreeCPUs < a.CPUs || n.FreeMemMiB < a.MemMiB {
			continue
		}
		want := 1 + w.rng.IntN(3)
		for k := range n.GPUs {
			g := &n.GPUs[k]
			if len(a.GPUs) == want || g.Unhealthy {
				continue
			}
			switch {
			case frac && (g.Free || g.FreeFraction > 0.5-fracEps && g.FreeFraction < 1):
				a.GPUs, a.GPUFraction = []string{g.UUID}, 0.5
				g.Free, g.FreeFraction = false, g.FreeFraction-0.5
			case !frac && g.Free:
				a.GPUs = append(a.GPUs, g.UUID)
				g.Free, g.FreeFraction = false, 1
			}
			if frac && len(a.GPUs) == 1 {
				break
			}
		}
		n.FreeCPUs -= a.CPUs
		n.FreeMemMiB -= a.MemMiB
		n.Allocs++
		w.base.Touch(ni)
		r.Nodes = append(r.Nodes, a)
	}
	if len(r.Nodes) == 0 {
		return
	}
	w.running = append(w.running, r)
	w.base.Start(&w.running[len(w.running)-1])
}

// end gives running job i's resources back and moves the last into its
// place.
func (w *baseWorld) end(i int) {
	for _, a := range w.running[i].Nodes {
		ni := slices.IndexFunc(w.nodes, func(n Node) bool { return n.Name == a.Node })
		n := &w.nodes[ni]
		n.FreeCPUs += a.CPUs
		n.FreeMemMiB += a.MemMiB
		n.Allocs--
		for _, u := range a.GPUs {
			g := &n.GPUs[slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.UUID == u })]
			if a.GPUFraction > 0 {
				g.FreeFraction += a.GPUFraction
				g.Free = g.FreeFraction > 1-fracEps
			} else {
				g.Free, g.FreeFraction = true, 1
			}
		}
		w.base.Touch(ni)
	}
	last := len(w.running) - 1
	w.running[i] = w.running[last]
	w.running = w.running[:last]
	w.base.End(i)
}

func (w *baseWorld) pending() []Job {
	var jobs []Job
	for k := range 6 {
		j := Job{ID: 100000 + spec.JobID(k), Partition: "gpu", Priority: int64(w.rng.IntN(5)), SubmitTime: w.now, QOS: "normal",
			User: "u", Account: "a", TimeLimit: time.Duration(10+w.rng.IntN(100)) * time.Minute,
			Req: spec.Resources{Nodes: 1 + w.rng.IntN(2), CPUsPerNode: 1, GPUsPerNode: 1 + w.rng.IntN(8)}}
		if k == 0 {
			j.QOS = "high" // may preempt the low ones
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// A cycle made from a Base kept through starts, ends and touched nodes
// has the work nodes, running jobs and profiles of one built from the
// same snapshot, and decides the same plan (preemptions included).
func TestBaseSameAsSnapshot(t *testing.T) {
	qos := []QOS{{Name: "normal"}, {Name: "high", Priority: 100, Preempt: []string{"low"}}, {Name: "low"}}
	for seed := range uint64(4) {
		w := newBaseWorld(seed)
		for step := range 300 {
			switch {
			case len(w.running) > 0 && w.rng.IntN(3) == 0:
				w.end(w.rng.IntN(len(w.running)))
			default:
				w.start()
			}
			if step%17 == 5 {
				// A GPU goes unhealthy or comes back: the caller touches
				// the node.
				ni := w.rng.IntN(len(w.nodes))
				g := &w.nodes[ni].GPUs[w.rng.IntN(len(w.nodes[ni].GPUs))]
				g.Unhealthy = !g.Unhealthy
				w.base.Touch(ni)
			}
			w.now = w.now.Add(time.Duration(1+w.rng.IntN(600)) * time.Second)
			snap := &Snapshot{Nodes: w.nodes, Running: w.running, QOS: qos, Jobs: w.pending()}
			cfg := Config{BackfillDepth: 100}
			full := newCycle(snap, w.now, cfg)
			kept := cycleFor(snap, w.now, cfg)
			w.base.nodesInto(kept)
			w.base.runningInto(kept)
			kept.finishSetup()
			where := fmt.Sprintf("seed %d step %d", seed, step)
			sameSetup(t, where, full, kept)
			_, want := NewState(snap, w.now, cfg)
			_, got := NewStateFrom(w.base, snap, w.now, cfg)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: plan from the Base\n%+v\nfrom the snapshot\n%+v", where, got, want)
			}
		}
		if len(w.running) < 5 {
			t.Fatalf("seed %d: %d jobs running at the end: the walk should keep the cluster busy", seed, len(w.running))
		}
	}
}

func sameSetup(t *testing.T, where string, a, b *cycle) {
	t.Helper()
	if len(a.nodes) != len(b.nodes) || len(a.running) != len(b.running) {
		t.Fatalf("%s: %d nodes %d running, from the Base %d nodes %d running", where, len(a.nodes), len(a.running), len(b.nodes), len(b.running))
	}
	for i := range a.nodes {
		x, y := a.nodes[i], b.nodes[i]
		if x.n != y.n || x.ok != y.ok || x.phys != y.phys || !slices.Equal(x.frac, y.frac) || !slices.Equal(x.fracEnd, y.fracEnd) ||
			!slices.Equal(x.running, y.running) || !slices.Equal(x.nvlink, y.nvlink) || !slices.Equal(x.numa, y.numa) {
			t.Fatalf("%s: node %d (%s)\n%+v\nfrom the Base\n%+v", where, i, x.n.Name, *x, *y)
		}
		ta, tb := x.prof.Times(0, backfill.Forever, nil), y.prof.Times(0, backfill.Forever, nil)
		if !slices.Equal(ta, tb) {
			t.Fatalf("%s: node %s profile steps at %v, from the Base %v", where, x.n.Name, ta, tb)
		}
		for _, at := range append(ta, 0) {
			if ra, rb := x.prof.Avail(at, at+1), y.prof.Avail(at, at+1); ra != rb {
				t.Fatalf("%s: node %s free at %d: %+v, from the Base %+v", where, x.n.Name, at, ra, rb)
			}
		}
	}
	for i := range a.running {
		x, y := &a.running[i], &b.running[i]
		if x.r != y.r || x.qos != y.qos || x.end != y.end || x.gpuCount != y.gpuCount || !slices.Equal(x.parts, y.parts) {
			t.Fatalf("%s: running %d\n%+v\nfrom the Base\n%+v", where, i, *x, *y)
		}
	}
}
