package controller

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// state is everything the owner knows. Only the owner goroutine touches it.
type state struct {
	nextID spec.JobID
	jobs   map[spec.JobID]*jobRec
	// pullsOn is the jobs each node last reported image pulls for
	// (images.go).
	pullsOn map[string][]spec.JobID
	// order holds every job id ascending (ids are monotonic, so appending
	// keeps it sorted); listing walks it instead of sorting a map.
	order   []spec.JobID
	pending map[spec.JobID]*jobRec
	nodes   map[string]*nodeRec
	// names holds the node names sorted (nodes are only ever added), so a
	// cycle does not sort 10,000 names each time.
	names []string
	// waiters are closed when their job is next published.
	waiters map[spec.JobID][]chan struct{}
	// idle tracks running jobs' GPU idleness for the idle-GPU policy.
	idle map[spec.JobID]*idleJob
	// genBase makes node generations grow across controller restarts, so
	// a node's long-poll from before a restart always sees a change.
	genBase uint64
	// active counts pending and running (not yet ended) jobs, for the
	// submit limits (limits.go).
	active activeCounts
	// last is each user's last submitted script and environment, which
	// the next submission shares when they are equal (share).
	last map[uint32]shared
	// keys are the jobs made by each submission that carried an
	// idempotency key (SubmitKeyed), by user and key.
	keys map[idemKey][]spec.JobID
	// interrupted maps the allocation of each run that node silence
	// interrupted to its job (Job.Interrupted; interrupted.go).
	interrupted map[string]spec.JobID
	// groups are each user's group names as last seen on a call of
	// theirs (access.go: allow_groups on a job its owner is not acting on).
	groups map[uint32][]string
	// ineligible are the queued jobs that break an access rule since a
	// reload, restart or requeue (access.go), with the rule.
	ineligible map[spec.JobID]accessRefusal
}

// idemKey is a submission's idempotency key, scoped to its user.
type idemKey struct {
	uid uint32
	key string
}

type shared struct {
	script string
	env    []string
}

// share makes j use the script and environment of its user's previous
// submission when they are equal, so a user's many jobs from one shell
// hold one copy (a 60-variable environment is ~3 KiB a job). Slices are
// never modified in place, so sharing them is safe.
func (s *state) share(j *spec.Job) {
	p, ok := s.last[j.UID]
	if ok && p.script == j.Script {
		j.Script = p.script
	}
	if ok && slices.Equal(p.env, j.Env) {
		j.Env = p.env
	}
	s.last[j.UID] = shared{j.Script, j.Env}
}

// activeCounts counts jobs that have not ended, by user (uid), by user
// and QOS, by user and account, and by account, and the bytes each
// user's such jobs store.
type activeCounts struct {
	user        map[uint32]int
	userQOS     map[scoped]int
	userAccount map[scoped]int
	account     map[string]int
	// bytes is payloadBytes once per plain job or array (while any of its
	// tasks has not ended), plus each job's recordBytes, by uid.
	bytes map[uint32]int64
	// arrays counts each array's tasks that have not ended.
	arrays map[spec.JobID]int
}

type scoped struct {
	uid  uint32
	name string
}

func newActiveCounts() activeCounts {
	return activeCounts{user: map[uint32]int{}, userQOS: map[scoped]int{}, userAccount: map[scoped]int{}, account: map[string]int{},
		bytes: map[uint32]int64{}, arrays: map[spec.JobID]int{}}
}

// add counts j (d = 1) or uncounts it (d = -1); record is its
// recordBytes as counted.
func (a *activeCounts) add(j *spec.Job, d int, record int64) {
	bump(a.user, j.UID, d)
	bump(a.userQOS, scoped{j.UID, j.QOS}, d)
	bump(a.userAccount, scoped{j.UID, j.Account}, d)
	bump(a.account, j.Account, d)
	b := record
	if j.ArrayJobID == 0 {
		b += payloadBytes(j)
	} else {
		was := a.arrays[j.ArrayJobID]
		bump(a.arrays, j.ArrayJobID, d)
		if d > 0 && was == 0 || d < 0 && was == 1 {
			b += payloadBytes(j) // the array's first task in, or last out
		}
	}
	bump(a.bytes, j.UID, int64(d)*b)
}

// payloadBytes is what a job's script, args and environment take: stored
// once per array (gpud/store's payloads), never changed after submission.
func payloadBytes(j *spec.Job) int64 {
	n := int64(len(j.Script))
	for _, l := range [][]string{j.Args, j.Env} {
		for _, s := range l {
			n += int64(len(s))
		}
	}
	return n
}

// recordBytes estimates what one job's own record takes (its row in
// state.db, and about as much again in memory): 1 KiB of fixed fields
// plus its variable strings, its comment included (scontrol update can
// change one task's comment, so the comment is the task's own).
func recordBytes(j *spec.Job) int64 {
	n := 1024
	for _, s := range []string{j.Name, j.Comment, j.WorkDir, j.SubmitDir, j.Output, j.Error, j.StdoutPath, j.StderrPath, j.Image,
		j.Depend, j.Array, j.JobSpec.Signal, j.Resources.Constraint, j.Resources.GPUModel, j.Resources.GPUProfile} {
		n += len(s)
	}
	for _, l := range [][]string{j.Resources.NodeList, j.Resources.Exclude} {
		for _, s := range l {
			n += len(s) + 3
		}
	}
	return int64(n)
}

func bump[K comparable, V int | int64](m map[K]V, k K, d V) {
	if n := m[k] + d; n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// countActive counts rec as not ended (once); uncountActive undoes it
// when it ends.
func (s *state) countActive(rec *jobRec) {
	if rec.charged == 0 {
		rec.charged = recordBytes(&rec.job)
		s.active.add(&rec.job, 1, rec.charged)
	}
}

func (s *state) uncountActive(rec *jobRec) {
	if rec.charged != 0 {
		s.active.add(&rec.job, -1, rec.charged)
		rec.charged = 0
	}
}

func newState(next spec.JobID, now time.Time) *state {
	return &state{
		nextID:  next,
		jobs:    map[spec.JobID]*jobRec{},
		pending: map[spec.JobID]*jobRec{},
		nodes:   map[string]*nodeRec{},
		waiters: map[spec.JobID][]chan struct{}{},
		idle:    map[spec.JobID]*idleJob{},
		genBase: uint64(now.UnixNano()),
		active:  newActiveCounts(),
		last:    map[uint32]shared{},
		keys:    map[idemKey][]spec.JobID{},

		interrupted: map[string]spec.JobID{},
		groups:      map[uint32][]string{},
		ineligible:  map[spec.JobID]accessRefusal{},
	}
}

func (s *state) addJob(rec *jobRec) {
	s.jobs[rec.job.ID] = rec
	if n := len(s.order); n == 0 || s.order[n-1] < rec.job.ID {
		s.order = append(s.order, rec.job.ID)
	} else {
		i, _ := slices.BinarySearch(s.order, rec.job.ID)
		s.order = slices.Insert(s.order, i, rec.job.ID)
	}
	if rec.job.State == spec.StatePending {
		s.pending[rec.job.ID] = rec
	}
	if !rec.job.State.Terminal() {
		s.countActive(rec)
	}
	if k := rec.job.IdempotencyKey; k != "" {
		ik := idemKey{rec.job.UID, k}
		s.keys[ik] = append(s.keys[ik], rec.job.ID)
	}
	if run := rec.job.Interrupted; run != nil && rec.job.State == spec.StatePending {
		s.interrupted[run.Alloc.ID] = rec.job.ID
	}
}

// addNode adds a node loaded from the store. It gets a fresh heartbeat
// deadline: the controller was away, so the node's silence proves nothing.
func (s *state) addNode(n *spec.Node, now time.Time) *nodeRec {
	r := &nodeRec{inv: n.Inventory, lastHB: now, gen: s.genBase, changed: make(chan struct{}), allocs: map[string]spec.JobID{}}
	switch n.State {
	case spec.NodeDrain, spec.NodeDraining:
		r.drain, r.drainReason = true, n.Reason
	case spec.NodeDown:
		r.down, r.downReason = true, n.Reason
	}
	s.nodes[n.Name] = r
	i, _ := slices.BinarySearch(s.names, n.Name)
	s.names = slices.Insert(s.names, i, n.Name)
	return r
}

// nodeNames is every node name in order. Callers must not modify it.
func (s *state) nodeNames() []string { return s.names }

// jobRec is one job. job is the owner's copy: its slices and Alloc are
// replaced, never modified in place, once published in view (the view
// shares them: newView).
type jobRec struct {
	job  spec.Job
	view *JobView
	// dep is job.Depend parsed, filled on first evaluation.
	dep *dependency
	// charged is the recordBytes the job is counted with in state.active
	// while it has not ended (0: not counted).
	charged int64
	// silent lists the nodes of the current run whose part ended because
	// they were marked DOWN for silence (interrupted.go).
	silentParts []string
}

func (r *jobRec) publish() { r.view = newView(&r.job) }

// livePart reports whether the current alloc has an unended part on node.
func (r *jobRec) livePart(node string) (spec.NodeAlloc, bool) {
	if r.job.Alloc == nil {
		return spec.NodeAlloc{}, false
	}
	for _, p := range r.job.Alloc.Nodes {
		if p.Node == node && !p.Ended {
			return p, true
		}
	}
	return spec.NodeAlloc{}, false
}

// liveNodes lists nodes of the current alloc whose part has not ended.
func (r *jobRec) liveNodes() []string {
	if r.job.Alloc == nil {
		return nil
	}
	var out []string
	for _, p := range r.job.Alloc.Nodes {
		if !p.Ended {
			out = append(out, p.Node)
		}
	}
	return out
}

// nodeRec is one registered node.
type nodeRec struct {
	inv         spec.Inventory
	down        bool
	downReason  string
	drain       bool
	drainReason string
	lastHB      time.Time
	// late says the node has missed heartbeats (not responding, shown
	// UNKNOWN): no new job is placed on it until it answers (lateAfter).
	late bool
	// gen counts changes to the node's assignments; changed is closed (and
	// replaced) at each bump to wake long-polls.
	gen     uint64
	changed chan struct{}
	// pollers are the long polls waiting on changed that the next commit
	// bumping the node answers itself (Controller.bumpAnswering).
	pollers []*poller
	// allocs maps each live allocation on the node to its job.
	allocs map[string]spec.JobID
	// over is what an admin set on the node (admin.go); nil: nothing.
	over *spec.NodeOverride
}

func (n *nodeRec) bump() {
	n.gen++
	close(n.changed)
	n.changed = make(chan struct{})
	n.pollers = n.pollers[:0]
}

// poller is a node's assignments long poll waiting for a change; the
// commit that bumps the node hands it the answer in ch (buffered), so the
// poll needs no turn of the owner loop of its own after the commit.
type poller struct {
	ch chan pollAnswer
	// gone: the poll stopped waiting (timed out, cancelled); it is
	// dropped at the node's next poll or bump.
	gone atomic.Bool
}

type pollAnswer struct {
	gen uint64
	out []Assignment
}

// addPoller registers p, dropping the polls that stopped waiting.
func (n *nodeRec) addPoller(p *poller) {
	n.pollers = slices.DeleteFunc(n.pollers, func(q *poller) bool { return q.gone.Load() })
	n.pollers = append(n.pollers, p)
}

// record is the node as the store keeps it: inventory, and the admin or
// health state (DRAIN, DOWN, or IDLE for "up").
func (n *nodeRec) record() *spec.Node {
	r := &spec.Node{Inventory: n.inv, State: spec.NodeIdle}
	switch {
	case n.drain:
		r.State, r.Reason = spec.NodeDrain, n.drainReason
	case n.down:
		r.State, r.Reason = spec.NodeDown, n.downReason
	}
	return r
}

// usage sums what the node's live allocations hold.
type usage struct {
	cpus int
	mem  int64
	gpus map[string]bool
	// shared is the share of each GPU held by fractional jobs (a GPU in
	// shared is also in gpus: it counts as allocated).
	shared map[string]float64
	// mig are the MIG slices live allocations hold, by parent GPU (which
	// is also in gpus: it is not free whole).
	mig  map[string][]spec.MIGSlice
	jobs []spec.JobID
}

// freeFraction is the unallocated share of GPU uuid: 1 when idle, 0 when
// held whole or fully shared.
func (u usage) freeFraction(uuid string) float64 {
	switch {
	case !u.gpus[uuid]:
		return 1
	case u.shared[uuid] > 0:
		return max(1-u.shared[uuid], 0)
	}
	return 0
}

func (s *state) usage(n *nodeRec) usage {
	u := usage{gpus: map[string]bool{}}
	for _, id := range n.allocs {
		rec := s.jobs[id]
		if rec == nil {
			continue
		}
		p, ok := rec.livePart(n.inv.Name)
		if !ok {
			continue
		}
		u.cpus += p.CPUs
		u.mem += p.MemMiB
		u.addMIG(id, p.MIG)
		for _, g := range p.GPUs {
			u.gpus[g] = true
			if p.GPUFraction > 0 && p.GPUFraction < 1 {
				if u.shared == nil {
					u.shared = map[string]float64{}
				}
				u.shared[g] += p.GPUFraction
			}
		}
		u.jobs = append(u.jobs, id)
	}
	slices.Sort(u.jobs)
	u.jobs = slices.Compact(u.jobs)
	return u
}

// displayState is the node state gpuq shows and the scheduler sees.
func (n *nodeRec) displayState(u usage) spec.NodeState {
	switch {
	case n.down || n.adminDown():
		return spec.NodeDown
	case n.late:
		return spec.NodeUnknown // not responding
	case n.drain && len(u.jobs) > 0:
		return spec.NodeDraining
	case n.drain:
		return spec.NodeDrain
	case len(u.jobs) == 0:
		return spec.NodeIdle
	case u.cpus >= n.inv.CPUs || (len(n.inv.GPUs) > 0 && len(u.gpus) >= len(n.inv.GPUs)):
		return spec.NodeAllocated
	}
	return spec.NodeMixed
}

// view returns the node as the API shows it.
func (c *Controller) nodeView(n *nodeRec) spec.Node {
	u := c.st.usage(n)
	out := spec.Node{
		Inventory:     n.inv,
		State:         n.displayState(u),
		LastHeartbeat: spec.NewTime(c.lastHeard(n.inv.Name, n.lastHB)),
		Partitions:    c.cfg.partitionsOf(n.inv.Name),
		AllocCPUs:     u.cpus,
		AllocMemMiB:   u.mem,
		AllocGPUs:     []string{},
		Jobs:          u.jobs,
		CachedImages:  len(c.nodeImageSet(n.inv.Name)), // images.go
	}
	if p := c.admin.power[n.inv.Name]; p != nil {
		out.Power, out.PowerSince = p.State, p.Since
	}
	switch {
	case n.adminDown():
		out.Reason = n.over.Reason
	case n.drain:
		out.Reason = n.drainReason
	case n.down:
		out.Reason = n.downReason
	case n.late:
		out.Reason = reasonNotResponding
	}
	if n.over != nil {
		out.Features, out.Weight = n.features(), n.over.Weight
		if n.over.State == spec.NodeFail {
			// An admin's FAIL is a drain that says so (Slurm's FAIL and
			// FAILING).
			switch out.State {
			case spec.NodeDrain:
				out.State = spec.NodeFail
			case spec.NodeDraining:
				out.State = spec.NodeFailing
			}
		}
	}
	var sick []string
	for _, g := range n.inv.GPUs {
		if unhealthy(g) {
			sick = append(sick, g.Health)
		}
		for _, m := range g.MIGSlices {
			if m.Health != "" {
				sick = append(sick, m.Health)
			}
		}
	}
	for _, nic := range n.inv.NICs {
		if nic.Health != "" {
			sick = append(sick, nic.Health)
		}
	}
	if len(sick) > 0 {
		// GPUs out of service show even on a node that is otherwise up.
		out.Reason = strings.Join(append(slices.DeleteFunc([]string{out.Reason}, func(s string) bool { return s == "" }), sick...), "; ")
	}
	out.GPUs = slices.Clone(out.GPUs)
	for i, g := range n.inv.GPUs {
		if u.gpus[g.UUID] {
			out.AllocGPUs = append(out.AllocGPUs, g.UUID)
		}
		if g.MIGMode != "" {
			out.GPUs[i].MIGSlices = migLayout(g, u.mig[g.UUID]) // mig.go
		}
	}
	return out
}
