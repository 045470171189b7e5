package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Advance reservations (scontrol create/update/delete/show reservation,
// sbatch --reservation): kept in the admin state (admin.go), so they are
// durable and an HA group replicates them; the scheduler keeps their
// nodes for their jobs (gpud/sched/advres.go). Errors use Slurm's words
// first, then say what to do.

// ReservationView is a reservation as scontrol and sinfo -T show it: its
// state now and its current or next window.
type ReservationView struct {
	spec.Reservation
	// State is ACTIVE while a window holds now, else INACTIVE.
	State string
	// Start and End are the window active now, else the next one (zero
	// when none is left).
	Start, End time.Time
}

// schedResv is r as the scheduler takes it.
func schedResv(r *spec.Reservation) sched.AdvanceReservation {
	ar := sched.AdvanceReservation{Name: r.Name, Start: r.StartTime.Time, End: r.EndTime.Time, Nodes: r.Nodes,
		Users: r.Users, Groups: r.Groups, Accounts: r.Accounts, Maint: r.Has(spec.ResvMaint), Flex: r.Has(spec.ResvFlex)}
	if r.GPUs > 0 {
		ar.GPUs = make(map[string]uint64, len(r.NodeGPUs))
		for n, ks := range r.NodeGPUs {
			ar.GPUs[n] = gpuMask(ks)
		}
	}
	switch r.Recurrence() {
	case spec.ResvHourly:
		ar.Recur = sched.RecurHourly
	case spec.ResvDaily:
		ar.Recur = sched.RecurDaily
	case spec.ResvWeekly:
		ar.Recur = sched.RecurWeekly
	case spec.ResvWeekday:
		ar.Recur = sched.RecurWeekday
	case spec.ResvWeekend:
		ar.Recur = sched.RecurWeekend
	}
	return ar
}

// schedResvs are the reservations for a scheduling snapshot.
func (c *Controller) schedResvs() []sched.AdvanceReservation {
	if len(c.admin.resvs) == 0 {
		return nil
	}
	out := make([]sched.AdvanceReservation, 0, len(c.admin.resvs))
	for _, name := range sortedKeys(c.admin.resvs) {
		out = append(out, schedResv(c.admin.resvs[name]))
	}
	return out
}

func (c *Controller) viewResv(r *spec.Reservation, now time.Time) ReservationView {
	v := ReservationView{Reservation: *r, State: "INACTIVE"}
	ar := schedResv(r)
	if s, e, ok := ar.Next(now); ok {
		v.Start, v.End = s, e
		if !s.After(now) {
			v.State = "ACTIVE"
		}
	}
	return v
}

// Reservations lists the reservations (anyone may see them, as in
// Slurm), by name.
func (c *Controller) Reservations(ctx context.Context) ([]ReservationView, error) {
	var out []ReservationView
	err := c.query(ctx, func() error {
		now := c.now()
		for _, name := range sortedKeys(c.admin.resvs) {
			out = append(out, c.viewResv(c.admin.resvs[name], now))
		}
		return nil
	})
	return out, err
}

// CreateReservation is scontrol create reservation; it returns the name
// (made up from the first user or account when none is given, as Slurm
// does).
func (c *Controller) CreateReservation(ctx context.Context, who Caller, u spec.ReservationUpdate) (string, error) {
	if err := requireRoot(who, "creating a reservation"); err != nil {
		return "", err
	}
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, format, args...))
	}
	if u.StartTime == nil {
		bad("StartTime must be specified; e.g. StartTime=now or StartTime=2026-12-07T09:00:00")
	}
	if u.EndTime == nil && u.Duration == nil {
		bad("Duration or EndTime must be specified; e.g. Duration=60 (minutes) or Duration=1-00:00:00")
	}
	if u.Nodes == nil && u.NodeCount == nil && (u.GPUs == nil || *u.GPUs == 0) {
		bad("Nodes, NodeCnt or TRES=gres/gpu=N must be specified; e.g. Nodes=gpu-[01-02], Nodes=ALL, NodeCnt=2 or TRES=gres/gpu=16")
	}
	if (u.Users == nil || len(*u.Users) == 0) && (u.Groups == nil || len(*u.Groups) == 0) && (u.Accounts == nil || len(*u.Accounts) == 0) {
		bad("Either Users/Groups and/or Accounts must be specified; e.g. Users=root, Groups=bio or Accounts=physics")
	}
	if err := resvName(u.Name); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return "", errors.Join(problems...)
	}
	var name string
	err := c.call(ctx, func(tx *txn) error {
		r := &spec.Reservation{Name: u.Name, Creator: orDefault(who.User, "root")}
		if r.Name == "" {
			base := "root"
			if u.Users != nil && len(*u.Users) > 0 {
				base = strings.TrimPrefix((*u.Users)[0], "-")
			} else if u.Accounts != nil && len(*u.Accounts) > 0 {
				base = (*u.Accounts)[0]
			} else if u.Groups != nil && len(*u.Groups) > 0 {
				base = (*u.Groups)[0]
			}
			for i := 1; ; i++ {
				if n := base + "_" + strconv.Itoa(i); c.admin.resvs[n] == nil {
					r.Name = n
					break
				}
			}
		} else if c.admin.resvs[r.Name] != nil {
			return spec.Errorf(spec.ErrConflict, "Duplicate reservation name: %s exists; update it (scontrol update ReservationName=%s ...) or choose another name", r.Name, r.Name)
		}
		if err := c.setResv(tx, r, u, true); err != nil {
			return err
		}
		name = r.Name
		c.log.Info("reservation created", "reservation", r.Name, "start", r.StartTime.Time, "end", r.EndTime.Time, "nodes", strings.Join(r.Nodes, ","), "flags", strings.Join(r.Flags, ","), "by", r.Creator)
		return nil
	})
	return name, err
}

// UpdateReservation is scontrol update ReservationName=NAME ...
func (c *Controller) UpdateReservation(ctx context.Context, who Caller, u spec.ReservationUpdate) error {
	if err := requireRoot(who, "updating a reservation"); err != nil {
		return err
	}
	return c.call(ctx, func(tx *txn) error {
		old := c.admin.resvs[u.Name]
		if old == nil {
			return c.noResv(u.Name)
		}
		r := *old
		if err := c.setResv(tx, &r, u, false); err != nil {
			return err
		}
		c.log.Info("reservation updated", "reservation", r.Name, "by", orDefault(who.User, "root"))
		return nil
	})
}

// DeleteReservation is scontrol delete ReservationName=NAME: refused
// while jobs run in it (Slurm's rule); its pending jobs then wait with
// ReservationDeleted.
func (c *Controller) DeleteReservation(ctx context.Context, who Caller, name string) error {
	if err := requireRoot(who, "deleting a reservation"); err != nil {
		return err
	}
	return c.call(ctx, func(tx *txn) error {
		if c.admin.resvs[name] == nil {
			return c.noResv(name)
		}
		var running []string
		for _, id := range c.sched.active {
			if rec := c.st.jobs[id]; rec != nil && rec.job.Reservation == name && !rec.job.State.Terminal() {
				running = append(running, strconv.FormatInt(int64(id), 10))
			}
		}
		if len(running) > 0 {
			return spec.Errorf(spec.ErrConflict, "Reservation is in use: job(s) %s run in %s; wait for them or cancel them first", strings.Join(running, ","), name)
		}
		c.dropResv(tx, name)
		c.log.Info("reservation deleted", "reservation", name, "by", orDefault(who.User, "root"))
		return nil
	})
}

func (c *Controller) dropResv(tx *txn, name string) {
	if r := c.admin.resvs[name]; r != nil {
		c.noteResvEnd(tx, r, c.now())
	}
	delete(c.admin.resvs, name)
	tx.saveAdmin(spec.AdminReservation, name, nil)
	tx.kick = true
}

func (c *Controller) noResv(name string) error {
	names := sortedKeys(c.admin.resvs)
	have := "there are none"
	if len(names) > 0 {
		have = "there are " + strings.Join(names, ", ")
	}
	return spec.Errorf(spec.ErrNotFound, "Requested reservation is invalid: no reservation %s (%s; scontrol show reservation lists them)", name, have)
}

// resvName checks a reservation name given by an admin.
func resvName(n string) error {
	if n == "" {
		return nil
	}
	if len(n) > 64 || strings.ContainsAny(n, " \t\n,=/\\\"'") {
		return spec.Errorf(spec.ErrInvalid, "ReservationName=%q: use letters, digits, '-', '_' and '.' (at most 64)", n)
	}
	return nil
}

// setResv applies u to r, checks the result (all problems at once) and
// keeps it. create requires what a new reservation must have.
func (c *Controller) setResv(tx *txn, r *spec.Reservation, u spec.ReservationUpdate, create bool) error {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, format, args...))
	}
	dur := r.EndTime.Sub(r.StartTime.Time)
	if u.StartTime != nil {
		r.StartTime = *u.StartTime
	}
	switch {
	case u.Duration != nil:
		dur = u.Duration.Std()
		r.EndTime = spec.NewTime(r.StartTime.Add(dur))
	case u.EndTime != nil:
		r.EndTime = *u.EndTime
		dur = r.EndTime.Sub(r.StartTime.Time)
	default:
		r.EndTime = spec.NewTime(r.StartTime.Add(dur)) // a moved start keeps its duration
	}
	if dur <= 0 {
		bad("Invalid time specification: the reservation ends (%s) before it starts (%s); give a positive Duration", r.EndTime.Format(time.RFC3339), r.StartTime.Format(time.RFC3339))
	}
	if u.Users != nil {
		r.Users = slices.Clone(*u.Users)
		if err := spec.CheckResvUsers(r.Users); err != nil {
			problems = append(problems, err)
		}
	}
	if u.Accounts != nil {
		r.Accounts = slices.Clone(*u.Accounts)
	}
	if u.Groups != nil {
		r.Groups = slices.Clone(*u.Groups)
		for _, g := range r.Groups {
			if g == "" || strings.HasPrefix(g, "-") {
				bad("Groups=%s: name the groups whose members may use it (a group cannot be refused, as in Slurm); e.g. Groups=bio,chem", strings.Join(r.Groups, ","))
				break
			}
		}
	}
	if len(r.Users) > 0 && len(r.Groups) > 0 {
		bad("Users=%s and Groups=%s: Users and Groups are mutually exclusive (Slurm's rule); give one, or clear the other with Users= or Groups=", strings.Join(r.Users, ","), strings.Join(r.Groups, ","))
	}
	if len(r.Users) == 0 && len(r.Groups) == 0 && len(r.Accounts) == 0 {
		bad("Either Users/Groups and/or Accounts must be specified")
	}
	for _, a := range r.Accounts {
		if len(c.cfg.Accounts) > 0 && c.cfg.account(a) == nil {
			bad("Invalid account or account/partition combination specified: %s is no account of this cluster", a)
		}
	}
	if u.Partition != nil {
		r.Partition = *u.Partition
		if r.Partition != "" && c.cfg.partition(r.Partition) == nil {
			bad("Invalid partition name specified: %s; this cluster has %s", r.Partition, strings.Join(c.cfg.partitionNames(), ", "))
		}
	}
	if u.GPUs != nil {
		r.GPUs = *u.GPUs
		if r.GPUs < 0 {
			bad("TRES=gres/gpu=%d: give a positive number of GPUs", r.GPUs)
		}
		if r.GPUs == 0 {
			r.GPUModel, r.NodeGPUs = "", nil
		}
	}
	if u.GPUModel != nil {
		r.GPUModel = *u.GPUModel
	}
	flags := slices.Clone(r.Flags)
	if u.Flags != nil {
		flags = flags[:0]
		for _, f := range *u.Flags {
			flags = append(flags, spec.NormFlag(f))
		}
		if r.Has(spec.ResvSpecNodes) && !slices.Contains(flags, spec.ResvSpecNodes) {
			flags = append(flags, spec.ResvSpecNodes)
		}
	}
	for _, f := range u.FlagsAdd {
		flags = append(flags, spec.NormFlag(f))
	}
	for _, f := range u.FlagsRemove {
		flags = slices.DeleteFunc(flags, func(g string) bool { return g == spec.NormFlag(f) })
	}
	var recur []string
	for _, f := range flags {
		if !slices.Contains(spec.ResvFlags, f) {
			bad("Invalid reservation flag: %s; gpud takes %s", f, strings.Join(spec.ResvFlags[:len(spec.ResvFlags)-1], ", "))
		}
		if slices.Contains(spec.ResvRecurrences, f) && !slices.Contains(recur, f) {
			recur = append(recur, f)
		}
	}
	if len(recur) > 1 {
		bad("Flags: %s: a reservation recurs in one way only", strings.Join(recur, " and "))
	}
	slices.Sort(flags)
	r.Flags = slices.Compact(flags)
	// Nodes: named (ALL is every node), else NodeCnt chosen now.
	if u.Nodes != nil {
		ns := *u.Nodes
		if len(ns) == 1 && strings.EqualFold(ns[0], "ALL") {
			ns = c.st.nodeNames()
		}
		var missing []string
		for _, n := range ns {
			if c.st.nodes[n] == nil {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			bad("Invalid node name specified: %s (no such node has registered)", strings.Join(missing, ","))
		}
		r.Nodes, r.NodeCount = slices.Clone(ns), 0
		if !r.Has(spec.ResvSpecNodes) {
			r.Flags = append(r.Flags, spec.ResvSpecNodes)
			slices.Sort(r.Flags)
		}
	} else if u.NodeCount != nil {
		r.NodeCount = *u.NodeCount
		r.Flags = slices.DeleteFunc(r.Flags, func(f string) bool { return f == spec.ResvSpecNodes })
		if r.NodeCount <= 0 {
			bad("NodeCnt=%d: give a positive number of nodes", r.NodeCount)
		}
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	if r.GPUs > 0 {
		if err := c.setResvGPUs(r, u, create); err != nil {
			return err
		}
	} else if u.NodeCount != nil && u.Nodes == nil {
		// Slurm picks the nodes when the reservation is made: free of
		// other reservations and (unless IGNORE_JOBS) of jobs then.
		avoid := map[string]bool{}
		for _, n := range c.st.nodeNames() {
			if c.resvConflict(r, n) != "" || !r.Has(spec.ResvIgnoreJobs) && c.busyAt(n, r) != "" {
				avoid[n] = true
			}
		}
		nodes := make([]sched.Node, 0, len(c.st.nodes))
		for _, name := range c.st.nodeNames() {
			sn, _ := c.schedNode(name)
			nodes = append(nodes, sn)
		}
		r.Nodes = sched.PickReservationNodes(nodes, r.NodeCount, 0, r.Partition, avoid)
		if len(r.Nodes) < r.NodeCount {
			return spec.Errorf(spec.ErrConflict, "Requested nodes are busy: NodeCnt=%d but only %d node(s) are free of jobs and other reservations then; use IGNORE_JOBS, fewer nodes or another time", r.NodeCount, len(r.Nodes))
		}
	} else {
		var conflicts, busy []string
		for _, n := range r.Nodes {
			if o := c.resvConflict(r, n); o != "" {
				conflicts = append(conflicts, n+" (in "+o+")")
			}
			if !r.Has(spec.ResvIgnoreJobs) {
				if j := c.busyAt(n, r); j != "" {
					busy = append(busy, n+" (job "+j+")")
				}
			}
		}
		if len(conflicts) > 0 {
			return spec.Errorf(spec.ErrConflict, "Requested reservation overlaps with another reservation: %s; add Flags=OVERLAP (or MAINT) to allow it", strings.Join(conflicts, ", "))
		}
		if len(busy) > 0 {
			return spec.Errorf(spec.ErrConflict, "Requested nodes are busy: %s run jobs past the reservation's start; add Flags=IGNORE_JOBS to reserve them anyway", strings.Join(busy, ", "))
		}
	}
	if c.admin.resvs == nil {
		c.admin.resvs = map[string]*spec.Reservation{}
	}
	c.admin.resvs[r.Name] = r
	tx.saveAdmin(spec.AdminReservation, r.Name, r)
	tx.kick = true
	c.noteResv(tx, r, c.now())
	return nil
}

// resvOverlapHorizon bounds how far ahead two recurring reservations are
// compared window by window.
const resvOverlapHorizon = 8 * 7 * 24 * time.Hour

// resvConflict names a reservation other than r that holds node n at a
// time r does, "" when none does (or either may overlap).
func (c *Controller) resvConflict(r *spec.Reservation, n string) string {
	if r.Has(spec.ResvOverlap) || r.Has(spec.ResvMaint) {
		return ""
	}
	a := schedResv(r)
	for _, name := range sortedKeys(c.admin.resvs) {
		o := c.admin.resvs[name]
		if name == r.Name || o.Has(spec.ResvOverlap) || o.Has(spec.ResvMaint) || !slices.Contains(o.Nodes, n) {
			continue
		}
		if r.GPUs > 0 && o.GPUs > 0 && gpuMask(r.NodeGPUs[n])&gpuMask(o.NodeGPUs[n]) == 0 {
			continue // different GPUs of the node
		}
		if b := schedResv(o); resvOverlap(&a, &b) {
			return name
		}
	}
	return ""
}

// resvOverlap reports whether a window of a meets one of b (within
// resvOverlapHorizon of a's start).
func resvOverlap(a, b *sched.AdvanceReservation) bool {
	t := a.Start
	for t.Before(a.Start.Add(resvOverlapHorizon)) {
		s, e, ok := a.Next(t)
		if !ok {
			break
		}
		if bs, _, ok := b.Next(s); ok && bs.Before(e) {
			return true
		}
		t = e
	}
	return false
}

// gpuMask is GPU indexes as a mask (bit k: GPU k; indexes past 63 are
// not scheduled).
func gpuMask(ks []int) uint64 {
	var m uint64
	for _, k := range ks {
		if k >= 0 && k < 64 {
			m |= 1 << k
		}
	}
	return m
}

// maskIndexes is a mask's GPU indexes, ascending.
func maskIndexes(m uint64) []int {
	var out []int
	for k := range 64 {
		if m&(1<<k) != 0 {
			out = append(out, k)
		}
	}
	return out
}

// setResvGPUs chooses (on create, or when TRES, Nodes, NodeCnt or the
// partition change) or checks the GPUs of a GPU-count reservation
// (TRES=gres/gpu=N): free then of jobs running past its start (without
// IGNORE_JOBS) and of other reservations holding them at a time it does
// (without OVERLAP or MAINT on either side), on the named nodes (with
// NodeCnt: GPUs/NodeCnt on each of that many), else on as few nodes as
// hold them.
func (c *Controller) setResvGPUs(r *spec.Reservation, u spec.ReservationUpdate, create bool) error {
	repick := create || u.GPUs != nil || u.GPUModel != nil || u.Nodes != nil || u.NodeCount != nil || u.Partition != nil
	if !repick {
		var conflicts, busy []string
		for _, n := range r.Nodes {
			if o := c.resvConflict(r, n); o != "" {
				conflicts = append(conflicts, n+" (in "+o+")")
			}
			if !r.Has(spec.ResvIgnoreJobs) {
				if j := c.busyGPUs(n, r, gpuMask(r.NodeGPUs[n])); j != "" {
					busy = append(busy, n+" (job "+j+")")
				}
			}
		}
		if len(conflicts) > 0 {
			return spec.Errorf(spec.ErrConflict, "Requested reservation overlaps with another reservation: %s; add Flags=OVERLAP (or MAINT) to allow it", strings.Join(conflicts, ", "))
		}
		if len(busy) > 0 {
			return spec.Errorf(spec.ErrConflict, "Requested nodes are busy: %s run jobs on its GPUs past the reservation's start; add Flags=IGNORE_JOBS to reserve them anyway", strings.Join(busy, ", "))
		}
		return nil
	}
	var only []string
	if u.Nodes != nil || r.Has(spec.ResvSpecNodes) {
		only = r.Nodes
	}
	perNode := 0
	if r.NodeCount > 0 {
		if r.GPUs%r.NodeCount != 0 {
			return spec.Errorf(spec.ErrInvalid, "TRES=gres/gpu=%d with NodeCnt=%d: the GPUs are reserved evenly, GPUs/NodeCnt on each node; give a multiple of NodeCnt", r.GPUs, r.NodeCount)
		}
		perNode = r.GPUs / r.NodeCount
	}
	a := schedResv(r)
	avoid, taken := map[string]bool{}, map[string]uint64{}
	nodes := make([]sched.Node, 0, len(c.st.nodes))
	for _, name := range c.st.nodeNames() {
		sn, jobs := c.schedNode(name)
		nodes = append(nodes, sn)
		if !r.Has(spec.ResvIgnoreJobs) {
			taken[name] |= c.gpusPast(name, sn, jobs, r)
		}
		if r.Has(spec.ResvOverlap) || r.Has(spec.ResvMaint) {
			continue
		}
		for _, oname := range sortedKeys(c.admin.resvs) {
			o := c.admin.resvs[oname]
			if oname == r.Name || o.Has(spec.ResvOverlap) || o.Has(spec.ResvMaint) || !slices.Contains(o.Nodes, name) {
				continue
			}
			if b := schedResv(o); !resvOverlap(&a, &b) {
				continue
			}
			if o.GPUs > 0 {
				taken[name] |= gpuMask(o.NodeGPUs[name])
			} else {
				avoid[name] = true
			}
		}
	}
	picked, got := sched.PickReservationGPUs(nodes, r.GPUs, perNode, r.GPUModel, r.Partition, only, avoid, taken)
	if got < r.GPUs {
		model := "GPUs"
		if r.GPUModel != "" {
			model = r.GPUModel + " GPUs"
		}
		where := "the cluster's nodes"
		if only != nil {
			where = hostlist.Compress(only)
		}
		return spec.Errorf(spec.ErrConflict, "Requested nodes are busy: TRES=gres/gpu=%d but only %d %s of %s are free of jobs and other reservations then%s; use IGNORE_JOBS, fewer GPUs, other nodes or another time",
			r.GPUs, got, model, where, map[bool]string{true: fmt.Sprintf(" (%d on each of %d nodes)", perNode, r.NodeCount), false: ""}[perNode > 0])
	}
	r.Nodes, r.NodeGPUs = nil, map[string][]int{}
	for _, name := range sortedKeys(picked) {
		r.Nodes = append(r.Nodes, name)
		r.NodeGPUs[name] = maskIndexes(picked[name])
	}
	return nil
}

// gpuIndexes maps node n's GPU UUIDs to their indexes.
func gpuIndexes(sn sched.Node) map[string]int {
	out := make(map[string]int, len(sn.GPUs))
	for k, g := range sn.GPUs {
		out[g.UUID] = k
	}
	return out
}

// gpusPast is the GPUs of node name held by jobs expected to run past
// r's start.
func (c *Controller) gpusPast(name string, sn sched.Node, jobs []spec.JobID, r *spec.Reservation) uint64 {
	var m uint64
	idx := gpuIndexes(sn)
	for _, id := range jobs {
		rec := c.st.jobs[id]
		if rec == nil || rec.job.Reservation == r.Name || !runsPast(&rec.job, r) {
			continue
		}
		if p, ok := rec.livePart(name); ok {
			for _, u := range p.GPUs {
				if k, ok := idx[u]; ok && k < 64 {
					m |= 1 << k
				}
			}
		}
	}
	return m
}

// busyGPUs names a job on node n holding one of the GPUs in mask past r's
// start ("" when none).
func (c *Controller) busyGPUs(n string, r *spec.Reservation, mask uint64) string {
	if c.st.nodes[n] == nil {
		return ""
	}
	sn, jobs := c.schedNode(n)
	idx := gpuIndexes(sn)
	for _, id := range jobs {
		rec := c.st.jobs[id]
		if rec == nil || rec.job.Reservation == r.Name || !runsPast(&rec.job, r) {
			continue
		}
		if p, ok := rec.livePart(n); ok {
			for _, u := range p.GPUs {
				if k, ok := idx[u]; ok && k < 64 && mask&(1<<k) != 0 {
					return strconv.FormatInt(int64(id), 10)
				}
			}
		}
	}
	return ""
}

// runsPast reports whether job j is expected to run past r's start.
func runsPast(j *spec.Job, r *spec.Reservation) bool {
	lim := j.TimeLimit.Std()
	return lim == 0 || j.StartTime.Add(lim+j.Suspended.Std()).After(r.StartTime.Time)
}

// busyAt names a job on node n expected to run past r's start ("" when
// none): it would have to be killed for the reservation.
func (c *Controller) busyAt(n string, r *spec.Reservation) string {
	nr := c.st.nodes[n]
	if nr == nil {
		return ""
	}
	_, jobs := c.schedNode(n)
	for _, id := range jobs {
		rec := c.st.jobs[id]
		if rec == nil || rec.job.Reservation == r.Name {
			continue
		}
		if runsPast(&rec.job, r) {
			return strconv.FormatInt(int64(id), 10)
		}
	}
	return ""
}

// checkResvAccess is the submit-time check of --reservation.
func (c *Controller) checkResvAccess(js *spec.JobSpec, who Caller) error {
	if js.Reservation == "" {
		return nil
	}
	r := c.admin.resvs[js.Reservation]
	if r == nil {
		return c.noResv(js.Reservation)
	}
	if ar := schedResv(r); who.UID != 0 && !ar.Admits(who.User, js.Account, c.callerGroups(who, who.UID)) {
		var need []string
		if len(r.Users) > 0 {
			need = append(need, "users "+strings.Join(r.Users, ","))
		}
		if len(r.Groups) > 0 {
			need = append(need, "members of groups "+strings.Join(r.Groups, ","))
		}
		if len(r.Accounts) > 0 {
			need = append(need, "accounts "+strings.Join(r.Accounts, ","))
		}
		return spec.Errorf(spec.ErrPermissionDenied, "Access denied to requested reservation: %s admits %s (each that is given must match: user %s, account %q)", r.Name,
			strings.Join(need, " and "), who.User, js.Account)
	}
	return nil
}

// resvUpkeep runs with each scheduling cycle's apply: a reservation
// whose last window has ended is deleted (Slurm does so), and a
// PURGE_COMP one once a job ran in it and none is left pending or
// running.
func (c *Controller) resvUpkeep(tx *txn, plan *sched.Plan, now time.Time) {
	if len(c.admin.resvs) == 0 {
		return
	}
	for _, s := range plan.Starts {
		rec := c.st.jobs[s.JobID]
		if rec == nil || rec.job.Reservation == "" {
			continue
		}
		if r := c.admin.resvs[rec.job.Reservation]; r != nil && r.UsedAt.IsZero() {
			r.UsedAt = spec.NewTime(now)
			tx.saveAdmin(spec.AdminReservation, r.Name, r)
		}
	}
	for _, name := range sortedKeys(c.admin.resvs) {
		r := c.admin.resvs[name]
		c.noteResv(tx, r, now) // a recurring one's next window, once it is the next
		if ar := schedResv(r); !hasWindow(&ar, now) {
			c.log.Info("reservation ended", "reservation", name)
			c.dropResv(tx, name)
			continue
		}
		if r.Has(spec.ResvPurgeComp) && !r.UsedAt.IsZero() && !c.resvInUse(name) {
			c.log.Info("reservation purged: its jobs are done (PURGE_COMP)", "reservation", name)
			c.dropResv(tx, name)
		}
	}
}

// resvInUse says whether a pending or running job asks for reservation
// name.
func (c *Controller) resvInUse(name string) bool {
	for _, rec := range c.st.pending {
		if rec.job.Reservation == name {
			return true
		}
	}
	for _, id := range c.sched.active {
		if rec := c.st.jobs[id]; rec != nil && rec.job.Reservation == name && !rec.job.State.Terminal() {
			return true
		}
	}
	return false
}

// decodeResv reads a stored reservation (loadAdmin).
func decodeResv(r spec.AdminRecord) (*spec.Reservation, error) {
	var v spec.Reservation
	if err := json.Unmarshal(r.Data, &v); err != nil {
		return nil, fmt.Errorf("decode reservation %s: %w", r.Name, err)
	}
	return &v, nil
}

func hasWindow(ar *sched.AdvanceReservation, now time.Time) bool {
	_, _, ok := ar.Next(now)
	return ok
}

// resvRecord is r's window [s, e) as accounting keeps it: the GPUs it
// reserves are a GPU-count reservation's, else every GPU of its nodes.
func (c *Controller) resvRecord(r *spec.Reservation, s, e time.Time) spec.ResvRecord {
	gpus := r.GPUs
	if gpus == 0 {
		for _, n := range r.Nodes {
			if nr := c.st.nodes[n]; nr != nil {
				gpus += len(nr.inv.GPUs)
			}
		}
	}
	return spec.ResvRecord{Name: r.Name, Start: spec.NewTime(s), End: spec.NewTime(e), Nodes: slices.Clone(r.Nodes), GPUs: gpus,
		Flags: slices.Clone(r.Flags), Users: slices.Clone(r.Users), Accounts: slices.Clone(r.Accounts)}
}

func sameResvRecord(a, b spec.ResvRecord) bool {
	return a.Name == b.Name && a.Start.Equal(b.Start.Time) && a.End.Equal(b.End.Time) && a.GPUs == b.GPUs &&
		slices.Equal(a.Nodes, b.Nodes) && slices.Equal(a.Flags, b.Flags) && slices.Equal(a.Users, b.Users) && slices.Equal(a.Accounts, b.Accounts)
}

// noteResv hands accounting r's current or next window when it differs
// from the one last handed (made, changed, or a recurring one's next):
// sreport reservation utilization reads them. A window moved before it
// began is removed; one cut short while it held ends now.
func (c *Controller) noteResv(tx *txn, r *spec.Reservation, now time.Time) {
	ar := schedResv(r)
	s, e, ok := ar.Next(now)
	if !ok {
		return
	}
	rec := c.resvRecord(r, s, e)
	old, had := c.admin.resvRecorded[r.Name]
	if had && sameResvRecord(old, rec) {
		return
	}
	if had && !old.Start.Equal(rec.Start.Time) {
		switch {
		case old.Start.After(now):
			tx.resvRecs = append(tx.resvRecs, spec.ResvRecord{Name: r.Name, Start: old.Start, Remove: true})
		case old.End.After(now):
			old.End = spec.NewTime(now)
			tx.resvRecs = append(tx.resvRecs, old)
		}
	}
	tx.resvRecs = append(tx.resvRecs, rec)
	if c.admin.resvRecorded == nil {
		c.admin.resvRecorded = map[string]spec.ResvRecord{}
	}
	c.admin.resvRecorded[r.Name] = rec
}

// noteResvEnd hands accounting the end of r (deleted, purged or past):
// its window that has not begun is removed, one that holds ends now.
func (c *Controller) noteResvEnd(tx *txn, r *spec.Reservation, now time.Time) {
	delete(c.admin.resvRecorded, r.Name)
	ar := schedResv(r)
	s, _, ok := ar.Next(now)
	switch {
	case !ok:
	case s.After(now):
		tx.resvRecs = append(tx.resvRecs, spec.ResvRecord{Name: r.Name, Start: spec.NewTime(s), Remove: true})
	default:
		tx.resvRecs = append(tx.resvRecs, c.resvRecord(r, s, now))
	}
}
