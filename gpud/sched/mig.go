package sched

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// MIGGPU is a MIG-enabled GPU as the scheduler sees it: the profile table
// the node reported and the GPU's layout.
type MIGGPU struct {
	// Dynamic GPUs may get new instances at free placements (the plan
	// names them in NodeAlloc.MIG; the node creates them before the job
	// starts and destroys them after it). Static GPUs offer only their
	// idle instances.
	Dynamic  bool
	Profiles []spec.MIGProfile
	// Slices are the instances on the GPU and the slices running jobs
	// hold (Job != 0); an instance with Job 0 is idle.
	Slices []spec.MIGSlice
}

// migWholeOK reports whether MIG GPU g may be handed out whole: dynamic,
// with nothing on it (the node switches MIG mode off for the job).
func migWholeOK(g *GPU) bool {
	return g.MIG != nil && g.MIG.Dynamic && len(g.MIG.Slices) == 0
}

// migGPU is one MIG GPU's layout during a cycle.
type migGPU struct {
	k    int // index in Node.GPUs
	spec *MIGGPU
	// used is the mask of memory slices covered by an instance (held,
	// idle or planned this cycle).
	used uint64
	// idle are existing instances no job holds and no start took yet.
	idle []spec.MIGSlice
	// count is the number of instances per profile name.
	count map[string]int
	// whole: the GPU is also offered whole (w.ok); the first slice planned
	// on it takes it from whole-GPU jobs.
	whole bool
}

// migCycle is the MIG view of a cycle, built when the first MIG job is
// placed.
type migCycle struct {
	gpus [][]*migGPU // by node index
	// nodes are the indices of the nodes with MIG GPUs, in node order;
	// cursor[profile] indexes it: nodes before have no room for the
	// profile.
	nodes  []int
	cursor map[string]int
	// failed[shape] is the shortest duration a job of that shape failed to
	// place with (longer ones fail too: slices, CPUs and memory only get
	// taken within a cycle, and a longer hold meets more reservations);
	// fitting how many nodes it found.
	failed  map[shape]int64
	fitting map[shape]int
}

func placementMask(p spec.MIGPlacement) uint64 {
	if p.Size <= 0 || p.Start < 0 || p.Start+p.Size > 64 {
		return 0
	}
	return (uint64(1)<<p.Size - 1) << p.Start
}

// migState returns the cycle's MIG view, building it from the snapshot on
// first use (cycles without MIG jobs never pay for it).
func (c *cycle) migState() *migCycle {
	if c.mig != nil {
		return c.mig
	}
	m := &migCycle{gpus: make([][]*migGPU, len(c.nodes)), cursor: map[string]int{}, failed: map[shape]int64{}, fitting: map[shape]int{}}
	for i, w := range c.nodes {
		for k := range w.n.GPUs {
			g := &w.n.GPUs[k]
			if g.MIG == nil || g.Unhealthy || k >= 64 {
				continue
			}
			if !g.Free && !slices.ContainsFunc(g.MIG.Slices, func(s spec.MIGSlice) bool { return s.Job != 0 }) {
				continue // a whole-GPU job holds it
			}
			mg := &migGPU{k: k, spec: g.MIG, count: map[string]int{}, whole: w.ok&(1<<k) != 0}
			for _, s := range g.MIG.Slices {
				mg.used |= placementMask(s.Placement)
				mg.count[s.Profile]++
				if s.Job == 0 && s.UUID != "" && s.Health == "" { // an instance out of service takes no job
					mg.idle = append(mg.idle, s)
				}
			}
			m.gpus[i] = append(m.gpus[i], mg)
		}
		if len(m.gpus[i]) > 0 {
			m.nodes = append(m.nodes, i)
		}
	}
	c.mig = m
	return m
}

// profileOf returns the GPU's profile named name.
func (g *migGPU) profileOf(name string) (*spec.MIGProfile, bool) {
	for i := range g.spec.Profiles {
		if g.spec.Profiles[i].Name == name {
			return &g.spec.Profiles[i], true
		}
	}
	return nil, false
}

// slot is a place for one slice: an idle instance (reuse) or a new
// instance at placement pl.
type slot struct {
	gpu   *migGPU
	reuse *spec.MIGSlice
	pl    spec.MIGPlacement
}

// usable reports whether a slice may be planned on g now: a GPU offered
// whole must still be free whole (no whole-GPU start or reservation has
// it) for its first slice.
func (g *migGPU) usable(free backfill.Res) bool {
	return !g.whole || g.used != 0 || free.GPUs&(1<<g.k) != 0
}

// bestSlot picks where one slice of profile goes on a node: the fullest
// GPU (packing, so other GPUs stay empty for big profiles and whole-GPU
// jobs) and, on it, an idle instance, else the placement that leaves the
// most room (so a 3g instance takes the placement that keeps the 4g one
// free).
func bestSlot(gs []*migGPU, profile string, free backfill.Res) (slot, bool) {
	var out slot
	found := false
	bestUsed, bestRoom := -1, -1
	const reuseRoom = 1 << 30 // reusing an instance costs no room
	for _, g := range gs {
		p, ok := g.profileOf(profile)
		if !ok || !g.usable(free) {
			continue
		}
		used := bits.OnesCount64(g.used)
		if found && used < bestUsed {
			continue
		}
		if i := slices.IndexFunc(g.idle, func(s spec.MIGSlice) bool { return s.Profile == profile }); i >= 0 {
			if !found || used > bestUsed || bestRoom < reuseRoom {
				out, found, bestUsed, bestRoom = slot{gpu: g, reuse: &g.idle[i], pl: g.idle[i].Placement}, true, used, reuseRoom
			}
			continue
		}
		if !g.spec.Dynamic || (p.MaxCount > 0 && g.count[profile] >= p.MaxCount) {
			continue
		}
		for _, pl := range p.Placements {
			mk := placementMask(pl)
			if mk == 0 || g.used&mk != 0 {
				continue
			}
			room := g.room(g.used | mk)
			if !found || used > bestUsed || (used == bestUsed && room > bestRoom) {
				out, found, bestUsed, bestRoom = slot{gpu: g, pl: pl}, true, used, room
			}
		}
	}
	if found && out.reuse != nil {
		r := *out.reuse // g.idle changes when the slot is taken
		out.reuse = &r
	}
	return out, found
}

// room scores a layout: every instance that could still be placed,
// weighted by its compute slices squared (keeping one large placement
// open beats keeping two small ones).
func (g *migGPU) room(used uint64) int {
	n := 0
	for _, p := range g.spec.Profiles {
		for _, pl := range p.Placements {
			if mk := placementMask(pl); mk != 0 && used&mk == 0 {
				n += p.Slices * p.Slices
			}
		}
	}
	return n
}

// take books s.
func (g *migGPU) take(s slot, profile string) {
	if s.reuse != nil {
		i := slices.IndexFunc(g.idle, func(x spec.MIGSlice) bool { return x.UUID == s.reuse.UUID })
		g.idle = slices.Delete(g.idle, i, i+1)
		return
	}
	g.used |= placementMask(s.pl)
	g.count[profile]++
}

// untake undoes take (a node or gang that could not hold every slice).
func (g *migGPU) untake(s slot, profile string) {
	if s.reuse != nil {
		g.idle = append(g.idle, *s.reuse)
		return
	}
	g.used &^= placementMask(s.pl)
	g.count[profile]--
}

// hasRoom reports whether some GPU of the node could hold one slice of
// profile (ignoring CPUs and reservations).
func hasRoom(gs []*migGPU, profile string) bool {
	for _, g := range gs {
		p, ok := g.profileOf(profile)
		if !ok {
			continue
		}
		if slices.ContainsFunc(g.idle, func(s spec.MIGSlice) bool { return s.Profile == profile }) {
			return true
		}
		if !g.spec.Dynamic || (p.MaxCount > 0 && g.count[profile] >= p.MaxCount) {
			continue
		}
		for _, pl := range p.Placements {
			if mk := placementMask(pl); mk != 0 && g.used&mk == 0 {
				return true
			}
		}
	}
	return false
}

// placeMIG plans j's slices now on the first nodes by name (so slices
// pack onto the first nodes) where CPUs, memory and every slice fit
// without delaying a reservation. It returns the allocations in rank
// order, or nil with the number of nodes that fit.
func (c *cycle) placeMIG(j *Job, dur int64) ([]spec.NodeAlloc, []int, int) {
	m := c.migState()
	r := &j.Req
	key, memo := shapeOf(j)
	if d, ok := m.failed[key]; memo && ok && dur >= d {
		return nil, nil, m.fitting[key]
	}
	want := max(r.Nodes, 1)
	n := max(r.GPUsPerNode, 1)
	cur := m.cursor[r.GPUProfile]
	first := -1
	type booked struct {
		node  int
		slots []slot
	}
	var got []booked
	for x := cur; x < len(m.nodes) && len(got) < want; x++ {
		i := m.nodes[x]
		gs := m.gpus[i]
		if !hasRoom(gs, r.GPUProfile) {
			continue
		}
		if first < 0 {
			first = x
		}
		w := c.nodes[i]
		if !c.migEligible(w, j) {
			continue
		}
		free := w.freeNow(c.off, dur)
		if free.CPUs < r.CPUsPerNode || free.MemMiB < memNeed(w, r) || r.Exclusive && free.Allocs > 0 {
			continue
		}
		var ss []slot
		for range n {
			s, ok := bestSlot(gs, r.GPUProfile, free)
			if !ok {
				break
			}
			s.gpu.take(s, r.GPUProfile)
			ss = append(ss, s)
		}
		if len(ss) < n {
			for _, s := range ss {
				s.gpu.untake(s, r.GPUProfile)
			}
			continue
		}
		got = append(got, booked{node: i, slots: ss})
	}
	// Within a cycle slices only get taken, so nodes without room now
	// stay without room (State.End does not return slices).
	if first < 0 {
		m.cursor[r.GPUProfile] = len(m.nodes)
	} else if first > cur {
		m.cursor[r.GPUProfile] = first
	}
	if len(got) < want {
		for _, b := range got {
			for _, s := range b.slots {
				s.gpu.untake(s, r.GPUProfile)
			}
		}
		if d, ok := m.failed[key]; memo && (!ok || dur < d) {
			m.failed[key], m.fitting[key] = dur, len(got)
		}
		return nil, nil, len(got)
	}
	allocs := make([]spec.NodeAlloc, 0, want)
	nodes := make([]int, 0, want)
	for rank, b := range got {
		nodes = append(nodes, b.node)
		w := c.nodes[b.node]
		a := spec.NodeAlloc{Node: w.n.Name, Rank: rank, CPUs: r.CPUsPerNode, MemMiB: memNeed(w, r)}
		for _, s := range b.slots {
			sl := spec.MIGSlice{GPU: w.n.GPUs[s.gpu.k].UUID, Profile: r.GPUProfile, Placement: s.pl}
			if s.reuse != nil {
				sl.UUID = s.reuse.UUID
			}
			a.MIG = append(a.MIG, sl)
		}
		a.NICs = pickNICs(w.n, &a, r.RDMA)
		allocs = append(allocs, a)
	}
	return allocs, nodes, len(got)
}

// decideMIG starts a MIG job now or explains why it waits. MIG jobs get
// no reservation and do not preempt (yet): they start when slices are
// free, never delaying a reservation of a higher job.
func (c *cycle) decideMIG(j *Job, dur int64) {
	allocs, nodes, fitting := c.placeMIG(j, dur)
	if allocs != nil {
		c.startMIG(j, allocs, nodes, dur)
		return
	}
	// Counted per node like any job (filters.go): the static filters'
	// reasons, and the mig filter's for the nodes with no room for the slices.
	c.unplaced = append(c.unplaced, unplaced{j: j, m: c.memoFor(j)})
	p := Pending{JobID: j.ID, Detail: fmt.Sprintf("needs %s; %d of %d nodes fit now", describeMIG(j.Req), fitting, len(c.nodes))}
	if !c.blocked {
		p.Reason = spec.ReasonResources
		c.blocked = true
	} else {
		p.Reason = spec.ReasonPriority
	}
	c.plan.Pending = append(c.plan.Pending, p)
}

// startMIG books a MIG job's CPUs and memory (and the whole GPUs its
// first slices take from whole-GPU jobs) and adds the start to the plan.
func (c *cycle) startMIG(j *Job, allocs []spec.NodeAlloc, nodes []int, dur int64) {
	var parts []runPart
	for x, a := range allocs {
		ni := nodes[x]
		w := c.nodes[ni]
		res := backfill.Res{CPUs: a.CPUs, MemMiB: a.MemMiB, Allocs: 1}
		// A GPU offered whole that now carries slices is no longer whole
		// for the rest of the cycle (and, in State, until the next full
		// cycle: the bits are not in res, so End does not return them).
		var gone uint64
		for _, g := range c.mig.gpus[ni] {
			if g.whole && g.used != 0 && w.phys.GPUs&(1<<g.k) != 0 {
				gone |= 1 << g.k
			}
		}
		if gone != 0 {
			w.phys.GPUs &^= gone
			w.prof.Hold(c.off, backfill.Forever, backfill.Res{GPUs: gone})
		}
		w.phys.CPUs -= res.CPUs
		w.phys.MemMiB -= res.MemMiB
		w.phys.Allocs++
		w.prof.Hold(c.off, backfill.Add(c.off, dur), res)
		parts = append(parts, runPart{node: ni, res: res})
	}
	lc := limCount{qos: j.QOS, user: j.User, account: j.Account, gpus: jobGPUs(j)}
	if c.track {
		c.started[j.ID] = startRec{parts: parts, at: c.off, end: backfill.Add(c.off, dur), lim: lc, partial: true}
	}
	c.plan.Starts = append(c.plan.Starts, Start{JobID: j.ID, Nodes: allocs, Backfilled: c.reserving(j)})
	c.lim.add(lc.qos, lc.user, lc.account, lc.gpus)
}

func describeMIG(r spec.Resources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) with %d CPUs", max(r.Nodes, 1), r.CPUsPerNode)
	if r.MemMiB > 0 {
		fmt.Fprintf(&b, ", %d MiB", r.MemMiB)
	}
	if r.MemWholeNode {
		b.WriteString(", all its memory")
	}
	fmt.Fprintf(&b, ", %d× MIG %s", max(r.GPUsPerNode, 1), r.GPUProfile)
	return b.String()
}

// migVerifier checks MIG starts for Verify: every slice is on a MIG GPU
// of its node that offers the profile, at one of the profile's
// placements, and either reuses an idle instance exactly once or (on a
// dynamic GPU) overlaps no instance, held slice or other planned slice.
type migVerifier struct {
	gpus map[string]*GPU
	// taken are the memory slices covered on each GPU; sliced the GPUs
	// that carry slices (so none of them is handed out whole).
	taken  map[string]uint64
	reused map[string]bool
	sliced map[string]bool
}

func newMIGVerifier(snap *Snapshot) *migVerifier {
	v := &migVerifier{gpus: map[string]*GPU{}, taken: map[string]uint64{}, reused: map[string]bool{}, sliced: map[string]bool{}}
	for i := range snap.Nodes {
		for k := range snap.Nodes[i].GPUs {
			g := &snap.Nodes[i].GPUs[k]
			v.gpus[g.UUID] = g
			if g.MIG == nil {
				continue
			}
			for _, s := range g.MIG.Slices {
				v.taken[g.UUID] |= placementMask(s.Placement)
				v.sliced[g.UUID] = true
			}
		}
	}
	return v
}

func (v *migVerifier) check(j *Job, n *Node, a spec.NodeAlloc, gpuTaken map[string]spec.JobID) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("job %d on %s: "+format, append([]any{j.ID, a.Node}, args...)...))
	}
	if len(a.GPUs) > 0 || a.GPUFraction != 0 {
		bad("a MIG allocation holds whole or shared GPUs %v", a.GPUs)
	}
	if want := max(j.Req.GPUsPerNode, 1); len(a.MIG) != want {
		bad("wants %d MIG slices of %s, got %d", want, j.Req.GPUProfile, len(a.MIG))
	}
	for _, s := range a.MIG {
		g := v.gpus[s.GPU]
		if g == nil || !slices.ContainsFunc(n.GPUs, func(x GPU) bool { return x.UUID == s.GPU }) {
			bad("slice on GPU %s, which is not on the node", s.GPU)
			continue
		}
		if g.MIG == nil {
			bad("slice on GPU %s, which is not in MIG mode", s.GPU)
			continue
		}
		if s.Profile != j.Req.GPUProfile {
			bad("slice of profile %s, wants %s", s.Profile, j.Req.GPUProfile)
		}
		if prev, whole := gpuTaken[s.GPU]; whole && !v.sliced[s.GPU] {
			bad("slice on GPU %s, which is held whole (by job %d; 0 = before the cycle)", s.GPU, prev)
		}
		if s.UUID != "" {
			i := slices.IndexFunc(g.MIG.Slices, func(x spec.MIGSlice) bool { return x.UUID == s.UUID })
			switch {
			case i < 0:
				bad("reuses MIG instance %s, which is not on GPU %s", s.UUID, s.GPU)
			case g.MIG.Slices[i].Job != 0:
				bad("reuses MIG instance %s, which job %d holds", s.UUID, g.MIG.Slices[i].Job)
			case g.MIG.Slices[i].Health != "":
				bad("reuses MIG instance %s, which is out of service (%s)", s.UUID, g.MIG.Slices[i].Health)
			case g.MIG.Slices[i].Placement != s.Placement || g.MIG.Slices[i].Profile != s.Profile:
				bad("reuses MIG instance %s with a different profile or placement", s.UUID)
			case v.reused[s.UUID]:
				bad("reuses MIG instance %s, already given to another job of the plan", s.UUID)
			}
			v.reused[s.UUID] = true
			continue
		}
		if !g.MIG.Dynamic {
			bad("plans a new instance on static MIG GPU %s", s.GPU)
		}
		i := slices.IndexFunc(g.MIG.Profiles, func(p spec.MIGProfile) bool { return p.Name == s.Profile })
		if i < 0 || !slices.Contains(g.MIG.Profiles[i].Placements, s.Placement) {
			bad("placement %d+%d is not one of profile %s on GPU %s", s.Placement.Start, s.Placement.Size, s.Profile, s.GPU)
		}
		mk := placementMask(s.Placement)
		if v.taken[s.GPU]&mk != 0 {
			bad("MIG slice %s at %d+%d on GPU %s overlaps another instance", s.Profile, s.Placement.Start, s.Placement.Size, s.GPU)
		}
		v.taken[s.GPU] |= mk
		v.sliced[s.GPU] = true
		gpuTaken[s.GPU] = j.ID
	}
	return errs
}
