package controller

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

const (
	maxNameLen = 256
	maxNice    = 10000
	// qosWeight spaces QOS priorities so nice only orders jobs within a QOS.
	qosWeight = 100000
)

// Submit validates js, assigns the job an id and returns it once the job
// is durably stored. Defaults are applied here: partition, QOS, time
// limit, one node, one CPU. For an array it returns the array job id.
func (c *Controller) Submit(ctx context.Context, who Caller, js spec.JobSpec) (spec.JobID, error) {
	ids, err := c.SubmitAll(ctx, who, js)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// SubmitAll is Submit returning every job made: one per task of an array
// (--array), with consecutive ids, all stored in one transaction; the
// first is the array job id. A plain job gives one id.
func (c *Controller) SubmitAll(ctx context.Context, who Caller, js spec.JobSpec) ([]spec.JobID, error) {
	return c.SubmitKeyed(ctx, who, js, "")
}

// SubmitKeyed is SubmitAll for a submission named by an idempotency key
// (the client's Idempotency-Key; "" for none): when a job of the same
// user already carries key, its ids are returned and nothing is made, so
// a client that lost the answer to a submission can send it again. The
// key is stored with the job (state.db, replicated in HA), so a new
// leader answers a resend of a submission the old one committed.
func (c *Controller) SubmitKeyed(ctx context.Context, who Caller, js spec.JobSpec, key string) ([]spec.JobID, error) {
	return c.submitKeyed(ctx, who, &js, key)
}

// submitKeyed is SubmitKeyed of *js, which it does not change.
func (c *Controller) submitKeyed(ctx context.Context, who Caller, js *spec.JobSpec, key string) ([]spec.JobID, error) {
	var ids []spec.JobID
	err := c.call(ctx, func(tx *txn) error {
		var err error
		ids, err = c.submitIn(tx, who, *js, key)
		return err
	})
	return ids, err
}

// submitIn is SubmitKeyed's work in the owner's transaction tx (the
// fidelity harness submits in the same operation as the ends of the
// second, as a controller answers them with one cycle).
func (c *Controller) submitIn(tx *txn, who Caller, js spec.JobSpec, key string) ([]spec.JobID, error) {
	// A plain job (one task) is made in its record; an array's tasks are
	// copies of it.
	rec0 := new(jobRec)
	if err := c.fillJob(&rec0.job, who, js); err != nil {
		return nil, err
	}
	j := &rec0.job
	if key != "" {
		if prev := c.st.keys[idemKey{j.UID, key}]; len(prev) > 0 {
			return slices.Clone(prev), nil
		}
		j.IdempotencyKey = key
	}
	tasks := []int{-1}
	if j.Array != "" {
		var err error
		tasks, _, err = parseArray(j.Array) // validated by newJob
		if err != nil {
			return nil, err
		}
	}
	if err := c.checkAccountLimits(j, len(tasks)); err != nil {
		return nil, err
	}
	if err := c.checkUserSubmitLimit(who, j, len(tasks)); err != nil {
		return nil, err
	}
	if err := c.checkSubmitSize(j, len(tasks)); err != nil {
		return nil, err
	}
	if err := c.checkUserSubmitSize(who, j, len(tasks)); err != nil {
		return nil, err
	}
	c.st.share(j)
	first := c.st.nextID
	var ids []spec.JobID
	for _, t := range tasks {
		rec := rec0
		if len(tasks) > 1 {
			rec = &jobRec{job: *j}
		}
		nj := &rec.job
		nj.ID = c.st.nextID
		c.st.nextID++
		if t >= 0 {
			nj.ArrayJobID, nj.ArrayTaskID = first, t
		}
		resolveOutput(nj)
		c.st.addJob(rec)
		tx.saveJob(rec)
		ids = append(ids, nj.ID)
		switch {
		case c.incrementalSubmit(nj):
			tx.submitted = append(tx.submitted, nj.ID)
		case nj.Hold:
			// A held job cannot start, so it changes no plan: no
			// full cycle (O(pending) each, for every sbatch --hold
			// in a loop) until a release kicks one.
		default:
			tx.kick = true
		}
	}
	tx.counter = true
	return ids, nil
}

// TestResult says what a --test-only submission would do now.
type TestResult struct {
	// Start is set when the job would start at once, or when it would
	// wait for a reservation (its expected start), on Nodes.
	Start  time.Time
	Nodes  []string
	Reason string
	// Message is a sentence for the user.
	Message string
}

// TestSubmit validates js and runs a scheduling pass over the current
// queue with the job added, without keeping anything.
func (c *Controller) TestSubmit(ctx context.Context, who Caller, js spec.JobSpec) (TestResult, error) {
	var res TestResult
	err := c.call(ctx, func(tx *txn) error {
		j, err := c.newJob(who, js)
		if err != nil {
			return err
		}
		if err := c.checkAccountLimits(j, 1); err != nil {
			return err
		}
		if err := c.checkUserSubmitLimit(who, j, 1); err != nil {
			return err
		}
		if err := c.checkSubmitSize(j, 1); err != nil {
			return err
		}
		if err := c.checkUserSubmitSize(who, j, 1); err != nil {
			return err
		}
		j.ID = c.st.nextID // not consumed: the job is not kept
		now := c.now()
		snap := c.snapshot(now)
		sj := c.schedJob(j)
		if j.Depend != "" {
			c.depFlags(&sj, &jobRec{job: *j}, c.singletons(snap))
		}
		snap.Jobs = append(snap.Jobs, sj)
		plan := sched.Schedule(snap, now, c.schedConfig())
		for _, s := range plan.Starts {
			if s.JobID == j.ID {
				res.Start = now
				for _, a := range s.Nodes {
					res.Nodes = append(res.Nodes, a.Node)
				}
				res.Message = fmt.Sprintf("job would start now on %s", strings.Join(res.Nodes, ","))
				return nil
			}
		}
		for _, p := range plan.Pending {
			if p.JobID == j.ID {
				res.Reason = p.Reason
				res.Message = fmt.Sprintf("job would wait: %s (%s)", p.Reason, p.Detail)
				for _, m := range plan.Placement {
					if m.JobID == j.ID && m.Summary != "" {
						res.Message += "; " + m.Summary
					}
				}
				if !p.ExpectedStart.IsZero() {
					res.Start = p.ExpectedStart
				}
			}
		}
		for _, r := range plan.Reservations {
			if r.JobID == j.ID && !res.Start.IsZero() {
				for _, a := range r.Nodes {
					res.Nodes = append(res.Nodes, a.Node)
				}
			}
		}
		return nil
	})
	return res, err
}

// newJob validates a submission and returns the job it makes, with every
// problem named at once.
func (c *Controller) newJob(who Caller, js spec.JobSpec) (*spec.Job, error) {
	j := new(spec.Job)
	if err := c.fillJob(j, who, js); err != nil {
		return nil, err
	}
	return j, nil
}

// fillJob is newJob into *j, which it overwrites when js is valid: a
// submission makes the job in its jobRec, not in a spec.Job of its own
// (1,360 bytes) that the record then copies.
func (c *Controller) fillJob(j *spec.Job, who Caller, js spec.JobSpec) error {
	if !who.Known {
		return spec.Errorf(spec.ErrPermissionDenied, "cannot tell who is submitting: connect through the controller's unix socket")
	}
	if who.UID == 0 && !c.cfg.AllowRootJobs {
		return spec.Errorf(spec.ErrRefused, "jobs may not run as root; submit as a regular user (or set allow_root_jobs in gpud.toml)")
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, spec.Errorf(spec.ErrInvalid, format, args...)) }

	// Credentials never travel with a job, whatever the client sent: the
	// environment is stored, shown to operators and given to the job.
	if kept, dropped := spec.DropSecretEnv(js.Env, c.cfg.SecretEnv); len(dropped) > 0 {
		c.log.Debug("secret variables dropped from a submitted job's environment", "user", who.User, "vars", strings.Join(dropped, ","))
		js.Env = kept
	}
	// What the job is on its own (spec.JobSpec.Validate, which the CLI and
	// the server ran too); below is only the cluster's policy: defaults,
	// partitions and QOS that exist, limits, permissions.
	if err := js.Validate(); err != nil {
		errs = append(errs, err)
	}
	if js.Name == "" {
		js.Name = "job"
	}
	if js.WorkDir == "" {
		js.WorkDir = js.SubmitDir
	}
	if js.Depend != "" {
		// A malformed one is Validate's to report (spec.ParseDependency).
		if d, err := spec.ParseDependency(js.Depend); err == nil {
			if err := c.checkDepend(who, js.Depend, d); err != nil {
				errs = append(errs, err)
			}
		}
	}

	// Account: jobs that name none are charged to the default one, so
	// accounting and fairshare always have someone to bill.
	if js.Account == "" {
		js.Account = c.cfg.DefaultAccount
	}
	if err := c.checkAccountAccess(who, js.Account); err != nil {
		errs = append(errs, err)
	}

	// QOS.
	if js.QOS == "" {
		js.QOS = c.cfg.DefaultQOS
	}
	q, ok := c.cfg.qos(js.QOS)
	if !ok {
		errs = append(errs, c.noQOS(js.QOS))
	}
	// Partition.
	o := owner{uid: who.UID, user: who.User, groups: c.callerGroups(who, who.UID)}
	listed := js.Partition // -p a,b: the others are kept for the scheduler
	var part *Partition
	if js.Partition == "" {
		part = c.cfg.defaultPartition()
		if part != nil {
			js.Partition = part.Name
		}
	} else if strings.Contains(js.Partition, ",") {
		part = c.pickPartition(&js, o)
	} else {
		part = c.cfg.partition(js.Partition)
	}
	if part != nil && !c.cfg.partitionVisible(part, who) {
		part = nil // a hidden partition who may not use does not exist for who
	}
	if part == nil {
		errs = append(errs, c.noPartition(js.Partition, who)) // policy.go
	} else {
		if err := c.closedPartition(part, who); err != nil {
			errs = append(errs, err)
		}
		switch {
		case js.TimeUnlimited:
			// Slurm's --time=UNLIMITED: the partition's maximum.
			js.TimeLimit = spec.Duration(part.MaxTime)
		case js.TimeLimit == 0:
			js.TimeLimit = spec.Duration(part.DefaultTime)
			if js.TimeLimit == 0 {
				js.TimeLimit = spec.Duration(part.MaxTime)
			}
		}
		if err := overPartitionTime(part, js.TimeLimit.Std()); err != nil {
			errs = append(errs, err)
		}
		if js.TimeMin > 0 && js.TimeLimit > 0 && js.TimeMin > js.TimeLimit {
			bad("--time-min=%s exceeds the job's time limit %s; give a time-min no longer than --time", fmtDur(js.TimeMin.Std()), fmtDur(js.TimeLimit.Std()))
		}
	}

	if err := checkNice(js.Nice, who.UID == 0); err != nil {
		errs = append(errs, err)
	}

	// Resources: defaults and the per-job node limit.
	r := &js.Resources
	switch {
	case r.Nodes == 0:
		r.Nodes = 1
	case r.Nodes > c.cfg.MaxNodesPerJob:
		bad("--nodes=%d exceeds the limit of %d nodes per job", r.Nodes, c.cfg.MaxNodesPerJob)
	}
	switch {
	case r.MaxNodes == r.Nodes:
		r.MaxNodes = 0 // N-N is N
	case r.MaxNodes != 0 && r.MaxNodes < r.Nodes:
		bad("--nodes=%d-%d: the range's top is below its bottom; use MIN-MAX with MIN <= MAX", r.Nodes, r.MaxNodes)
	case r.MaxNodes > c.cfg.MaxNodesPerJob:
		bad("--nodes=%d-%d exceeds the limit of %d nodes per job", r.Nodes, r.MaxNodes, c.cfg.MaxNodesPerJob)
	case r.MaxNodes != 0 && (r.TotalGPUs > 0 || r.GPUProfile != ""):
		bad("--nodes=%d-%d: a node range takes whole GPUs per node (--gpus-per-node), not --gpus totals or MIG slices", r.Nodes, r.MaxNodes)
	}
	if r.CPUsPerNode == 0 {
		r.CPUsPerNode = 1
	}
	if r.TotalGPUs > 0 && r.GPUsPerNode == 0 && r.Nodes > 0 {
		r.GPUsPerNode = r.TotalGPUs / r.Nodes
	}
	if r.GPUProfile != "" && r.GPUFraction == 0 && r.GPUsPerNode == 0 {
		r.GPUsPerNode = 1 // one slice
	}
	r.Constraint = strings.ReplaceAll(r.Constraint, " ", "")
	if len(errs) == 0 && part != nil {
		if err := c.checkSatisfiable(part, r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.checkCkptMode(part, js.CkptMode); err != nil {
		errs = append(errs, err)
	}
	if err := c.checkResvAccess(&js, who); err != nil { // reservation.go
		errs = append(errs, err)
	}
	// Who may run what where (access.go): the partition's, account's and
	// QOS's rules, on the job as it would be.
	if part != nil && ok {
		rs := c.access(&spec.Job{JobSpec: js, UID: who.UID, User: who.User}, o)
		for _, r := range rs {
			if r.reason != spec.ReasonInvalidAccount { // checkAccountAccess said it above
				errs = append(errs, r.err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	now := spec.NewTime(c.now())
	*j = spec.Job{
		JobSpec:    js,
		User:       who.User,
		UID:        who.UID,
		GID:        who.GID,
		State:      spec.StatePending,
		Reason:     spec.ReasonNone,
		SubmitTime: now,
		// Priority (documented in README): QOS priority first, then nice
		// lowers it; the multifactor weights, when set, replace it.
		Priority: c.cfg.basePriority(q.Name, js.Nice),
	}
	if js.Hold {
		j.Reason = spec.ReasonHeld
	}
	j.Partitions = c.partitionChoices(listed, j, o)
	return nil
}

// checkSatisfiable refuses a request that no registered node of the
// partition could ever hold, even empty. With no node registered yet
// (a controller just started) everything is accepted.
func (c *Controller) checkSatisfiable(part *Partition, r *spec.Resources) error {
	// Most jobs fit: stop at the first r.Nodes nodes that hold them, in
	// map order. The sorted walk below only runs to explain a refusal (or
	// check a node list), so a submission costs O(nodes) at worst, not a
	// sort of every node name.
	if len(r.NodeList) == 0 && r.GPUProfile == "" { // MIG profiles are checked in checkProfile
		fit := 0
		for name, n := range c.st.nodes {
			if slices.Contains(c.cfg.partitionsOf(name), part.Name) && nodeHolds(n, r) {
				if fit++; fit >= r.Nodes {
					return nil
				}
			}
		}
	}
	var members []*nodeRec
	for _, name := range c.st.nodeNames() {
		if slices.Contains(c.cfg.partitionsOf(name), part.Name) {
			members = append(members, c.st.nodes[name])
		}
	}
	if len(members) == 0 {
		return nil
	}
	var unknown []string
	for _, name := range r.NodeList {
		if c.st.nodes[name] == nil || !slices.Contains(c.cfg.partitionsOf(name), part.Name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		var names []string
		for _, n := range members {
			names = append(names, n.inv.Name)
		}
		return spec.Errorf(spec.ErrInvalid, "--nodelist names %s, not in partition %s (its nodes: %s)", strings.Join(unknown, ","), part.Name, strings.Join(names, ","))
	}
	if r.GPUProfile != "" {
		return checkProfile(members, r) // mig.go
	}
	fit := 0
	var largest *nodeRec
	for _, n := range members {
		if len(r.NodeList) > 0 && !slices.Contains(r.NodeList, n.inv.Name) || slices.Contains(r.Exclude, n.inv.Name) {
			continue
		}
		if !sched.HasFeatures(n.features(), r.Constraint) {
			continue
		}
		if largest == nil || countGPUs(n, r.GPUModel) > countGPUs(largest, r.GPUModel) || n.inv.CPUs > largest.inv.CPUs {
			largest = n
		}
		if nodeHolds(n, r) {
			fit++
		}
	}
	if fit >= r.Nodes {
		return nil
	}
	if r.GPUModel != "" && !slices.ContainsFunc(members, func(n *nodeRec) bool { return countGPUs(n, r.GPUModel) > 0 }) {
		return spec.Errorf(spec.ErrInvalid, "no node of partition %s has GPU model %s; this cluster has: %s", part.Name, r.GPUModel, strings.Join(c.gpuModels(), ", "))
	}
	want := fmt.Sprintf("%d CPUs", r.CPUsPerNode)
	if r.MemMiB > 0 {
		want += fmt.Sprintf(", %d MiB", r.MemMiB)
	}
	if r.GPUsPerNode > 0 {
		want += fmt.Sprintf(", %d× %s", r.GPUsPerNode, orDefault(r.GPUModel, "gpu"))
	}
	if r.Constraint != "" {
		want += ", features " + r.Constraint
	}
	if r.RDMA != 0 {
		want += fmt.Sprintf(", %d RDMA NIC(s)", max(r.RDMA, 1))
	}
	largestDesc := "none matches the node list, exclusions and features"
	if largest != nil {
		largestDesc = fmt.Sprintf("largest: %s with %d× %s, %d CPUs, %d MiB", largest.inv.Name, countGPUs(largest, r.GPUModel), orDefault(r.GPUModel, "gpu"), largest.inv.CPUs, largest.inv.MemMiB)
	}
	return spec.Errorf(spec.ErrInvalid, "requested %d node(s) with %s per node exceeds every node of partition %s (%d could hold it; %s); ask for less",
		r.Nodes, want, part.Name, fit, largestDesc)
}

// gpuModels lists the GPU models of every registered node, sorted.
func (c *Controller) gpuModels() []string {
	var models []string
	for _, n := range c.st.nodes {
		for _, g := range n.inv.GPUs {
			if g.Model != "" && !slices.Contains(models, g.Model) {
				models = append(models, g.Model)
			}
		}
	}
	if len(models) == 0 {
		return []string{"none"}
	}
	slices.Sort(models)
	return models
}

// pickPartition resolves sbatch's -p a,b: the first listed partition that
// exists, takes jobs, admits the job's time limit and has nodes that could
// hold it. Slurm takes the partition that can start the job first; gpud
// takes the first that fits, in the order given (docs/slurm-compat.md).
// With none, the first is returned so the usual checks explain why.
func (c *Controller) pickPartition(js *spec.JobSpec, o owner) *Partition {
	names := strings.Split(js.Partition, ",")
	r := js.Resources
	r.Nodes = max(r.Nodes, 1)
	if r.TotalGPUs > 0 && r.GPUsPerNode == 0 {
		r.GPUsPerNode = r.TotalGPUs / r.Nodes
	}
	for _, name := range names {
		if p := c.partitionFits(name, js, &r, o); p != nil {
			js.Partition = p.Name
			return p
		}
	}
	js.Partition = names[0]
	return c.cfg.partition(names[0])
}

// partitionFits returns partition name when it exists, takes jobs, lets
// js's account and QOS of o in, admits its time limit and has nodes that
// could hold r, else nil.
func (c *Controller) partitionFits(name string, js *spec.JobSpec, r *spec.Resources, o owner) *Partition {
	p := c.cfg.partition(name)
	if p == nil || p.State == PartitionDrain || p.State == PartitionInactive {
		return nil
	}
	if len(c.partitionAccess(p, js.Account, js.QOS, o)) > 0 {
		return nil
	}
	if limit := js.TimeLimit.Std(); p.MaxTime > 0 && limit > p.MaxTime {
		return nil
	}
	if c.checkSatisfiable(p, r) != nil {
		return nil
	}
	return p
}

// partitionChoices lists the partitions of -p a,b (listed) that could run
// the job j, its own first, then the others in the order given; nil when
// fewer than two could. The scheduler starts the job in whichever can
// start it first.
func (c *Controller) partitionChoices(listed string, j *spec.Job, o owner) []string {
	if !strings.Contains(listed, ",") {
		return nil
	}
	out := []string{j.Partition}
	for _, name := range strings.Split(listed, ",") {
		if name == j.Partition || slices.Contains(out, name) {
			continue
		}
		if c.partitionFits(name, &j.JobSpec, &j.Resources, o) != nil {
			out = append(out, name)
		}
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// nodeHolds reports whether n could ever hold one node's share of r: its
// node list, exclusions and features allow it, and it has the GPUs, CPUs
// and memory.
func nodeHolds(n *nodeRec, r *spec.Resources) bool {
	if len(r.NodeList) > 0 && !slices.Contains(r.NodeList, n.inv.Name) || slices.Contains(r.Exclude, n.inv.Name) ||
		!sched.HasFeatures(n.features(), r.Constraint) {
		return false
	}
	if r.RDMA != 0 && len(activeNICs(n.inv)) < max(r.RDMA, 1) {
		return false
	}
	need := r.GPUsPerNode
	if r.GPUFraction > 0 {
		need = 1 // a share of one GPU
	}
	return countGPUs(n, r.GPUModel) >= need && n.inv.CPUs >= r.CPUsPerNode && n.inv.MemMiB >= r.MemMiB
}

// checkCkptMode refuses a checkpoint mode the partition's nodes cannot
// honour. CRIU needs `criu check` to pass on a node (each agent reports it
// at registration); where none can, the reason of each is given.
func (c *Controller) checkCkptMode(part *Partition, mode string) error {
	switch mode {
	case "", spec.CkptModeCooperative:
		return nil
	case spec.CkptModeCRIU:
	default:
		return nil // spec.JobSpec.Validate names the unknown mode
	}
	if part == nil {
		return nil // the partition error says what is wrong
	}
	var why []string
	capable := 0
	for _, name := range c.st.nodeNames() {
		if !slices.Contains(c.cfg.partitionsOf(name), part.Name) {
			continue
		}
		n := c.st.nodes[name]
		if n.inv.CRIU == "ok" {
			capable++
			continue
		}
		why = append(why, fmt.Sprintf("%s: %s", name, orDefault(n.inv.CRIU, "its agent does not report CRIU support")))
	}
	if capable == 0 {
		if len(why) == 0 {
			why = []string{"no node registered"}
		}
		return spec.Errorf(spec.ErrInvalid, "--checkpoint-mode=criu: no node of partition %s can checkpoint with CRIU (%s); use --checkpoint (cooperative) instead",
			part.Name, strings.Join(why, "; "))
	}
	// TODO(#5): checkpoint and restore through containerd's task
	// checkpoint where criu check passes.
	return spec.Errorf(spec.ErrInvalid, "--checkpoint-mode=criu: %d node(s) of partition %s pass criu check, but this gpud does not yet checkpoint through CRIU; use --checkpoint (cooperative) instead",
		capable, part.Name)
}

func countGPUs(n *nodeRec, model string) int {
	k := 0
	for _, g := range n.inv.GPUs {
		if wholeCapable(g) && (model == "" || g.Model == model) {
			k++
		}
	}
	return k
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func fmtDur(d time.Duration) string {
	if d%time.Minute == 0 {
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		return fmt.Sprintf("%d:%02d:00", h, m)
	}
	return d.String()
}

// resolveOutput fills StdoutPath and StderrPath from the Output and Error
// patterns, expanding what is known at submit (%j %J %s %x %u %A %a %%);
// %N %n %t stay for the node to expand.
func resolveOutput(j *spec.Job) {
	out := j.Output
	if out == "" {
		out = "gpud-%j.out"
		if j.ArrayJobID != 0 {
			out = "gpud-%A_%a.out"
		}
	}
	j.StdoutPath = expand(out, j)
	if j.Error != "" {
		j.StderrPath = expand(j.Error, j)
	} else {
		j.StderrPath = j.StdoutPath
	}
}

func expand(pat string, j *spec.Job) string {
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		if pat[i] != '%' || i+1 == len(pat) {
			b.WriteByte(pat[i])
			continue
		}
		i++
		switch pat[i] {
		case 'j', 'J': // %J is jobid.stepid; the batch script's output is the job's
			b.WriteString(strconv.FormatUint(uint64(j.ID), 10))
		case 's':
			b.WriteString("batch")
		case 'x':
			b.WriteString(j.Name)
		case 'u':
			b.WriteString(j.User)
		case 'A':
			if j.ArrayJobID == 0 {
				b.WriteString(strconv.FormatUint(uint64(j.ID), 10))
			} else {
				b.WriteString(strconv.FormatUint(uint64(j.ArrayJobID), 10))
			}
		case 'a':
			if j.ArrayJobID == 0 {
				b.WriteString("4294967294") // Slurm's NO_VAL, as the node writes it
			} else {
				b.WriteString(strconv.Itoa(j.ArrayTaskID))
			}
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(pat[i])
		}
	}
	s := b.String()
	if !path.IsAbs(s) && j.WorkDir != "" {
		s = path.Join(j.WorkDir, s)
	}
	return s
}
