package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// RecordJobs writes the current state of jobs: the job rows, and for each
// job with an allocation that has started, its attempt and one usage row
// per allocated device. It is an idempotent upsert in one transaction:
// recording the same job again (a retry, a repeated state) replaces rather
// than adds, and a stale record arriving after a newer one (a RUNNING
// record retried after the COMPLETED one landed) does not roll anything
// back. The controller calls it at every state change, in particular when
// an attempt ends, since Job carries only the newest attempt's allocation.
func (db *DB) RecordJobs(ctx context.Context, jobs []spec.Job) (err error) {
	if len(jobs) == 0 {
		return nil
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record %d jobs: begin: %w", len(jobs), err)
	}
	ctx = execCtx(ctx) // the transaction still ends with ctx
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that made us roll back is the one to report
		}
	}()
	st := db.rec.in(ctx, tx)
	defer st.close()
	for i := range jobs {
		totalled, err := db.recordJob(ctx, st, &jobs[i])
		if err != nil {
			return fmt.Errorf("record job %d: %w", jobs[i].ID, err)
		}
		if totalled {
			continue
		}
		if err := recordTotals(ctx, st, jobs[i].ID); err != nil {
			return fmt.Errorf("record job %d: total its attempts: %w", jobs[i].ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record %d jobs: commit: %w", len(jobs), err)
	}
	return nil
}

// recordTotals keeps job id's totals (totalsSQL, clearTotalsSQL).
func recordTotals(ctx context.Context, st *recordStmts, id spec.JobID) error {
	res, err := st.totals.ExecContext(ctx, int64(id))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	_, err = st.clearTotals.ExecContext(ctx, int64(id))
	return err
}

// terminalStates is the SQL list of spec.JobState.Terminal states.
var terminalStates = func() string {
	var q []string
	for _, s := range spec.AllJobStates {
		if s.Terminal() {
			q = append(q, "'"+string(s)+"'")
		}
	}
	return "(" + strings.Join(q, ",") + ")"
}()

// jobColumns are the job row's columns RecordJobs writes, in the order
// of recordJob's arguments.
const jobColumns = `id, name, user, uid, account, "partition", qos, state, reason,
	exit_code, signal, submit_time, eligible_time, start_time, end_time, time_limit, nodes, gpus,
	gpu_count, gpu_model, gpu_profile, gpu_fraction, cpus, mem_mib, attempts, work_dir,
	array_job_id, array_task_id, wckey, ntasks, request, dependency, nice, array_max, pull_ms, pull_bytes, het_job_id, het_offset, reservation`

// insertNewJobSQL writes a job accounting has no row of yet, with its
// totals (newTotals), and nothing when it has one (upsertJobSQL then).
// The controller records a job when it ends, so in a burst nearly every
// record is of a new job; for those the attempt's usage rows need no
// delete (none can exist: foreign keys) and the totals no statement of
// their own. BenchmarkRecordJobsPerBatch and docs/fleet.md ("Session 17
// — acct") have what that saves.
const insertNewJobSQL = `INSERT INTO jobs (` + jobColumns + `, gpu_seconds, cpu_seconds, slice_seconds)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO NOTHING`

// The upsert keeps the stored row when the incoming one is older: a lower
// attempt, or the same attempt going from a terminal state back to a
// non-terminal one.
var upsertJobSQL = `INSERT INTO jobs (` + jobColumns + `)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET name=excluded.name, user=excluded.user, uid=excluded.uid,
	account=excluded.account, "partition"=excluded."partition", qos=excluded.qos,
	state=excluded.state, reason=excluded.reason, exit_code=excluded.exit_code,
	signal=excluded.signal, submit_time=excluded.submit_time, eligible_time=excluded.eligible_time,
	start_time=excluded.start_time, end_time=excluded.end_time, time_limit=excluded.time_limit,
	nodes=excluded.nodes, gpus=excluded.gpus, gpu_count=excluded.gpu_count,
	gpu_model=excluded.gpu_model, gpu_profile=excluded.gpu_profile,
	gpu_fraction=excluded.gpu_fraction, cpus=excluded.cpus, mem_mib=excluded.mem_mib,
	attempts=excluded.attempts, work_dir=excluded.work_dir, array_job_id=excluded.array_job_id,
	array_task_id=excluded.array_task_id, wckey=excluded.wckey, ntasks=excluded.ntasks,
	request=excluded.request, dependency=excluded.dependency, nice=excluded.nice, array_max=excluded.array_max,
	pull_ms=excluded.pull_ms, pull_bytes=excluded.pull_bytes,
	het_job_id=excluded.het_job_id, het_offset=excluded.het_offset, reservation=excluded.reservation
WHERE excluded.attempts > jobs.attempts OR (excluded.attempts = jobs.attempts
	AND NOT (jobs.state IN ` + terminalStates + ` AND excluded.state NOT IN ` + terminalStates + `))`

// An ended attempt is never reopened by a stale record of it running.
const upsertAttemptSQL = `INSERT INTO attempts (job_id, attempt, alloc_id, nodes, cpus, mem_mib, start_time, end_time,
	state, reason, checkpoint_seq, checkpoint_time, lost_work, pull_ms, pull_bytes)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(job_id, attempt) DO UPDATE SET alloc_id=excluded.alloc_id, nodes=excluded.nodes,
	cpus=excluded.cpus, mem_mib=excluded.mem_mib, start_time=excluded.start_time,
	end_time=excluded.end_time, state=excluded.state, reason=excluded.reason,
	checkpoint_seq=excluded.checkpoint_seq, checkpoint_time=excluded.checkpoint_time,
	lost_work=excluded.lost_work, pull_ms=excluded.pull_ms, pull_bytes=excluded.pull_bytes
WHERE NOT (attempts.end_time IS NOT NULL AND excluded.end_time IS NULL)`

type recordStmts struct {
	newJob, job, attempt, delUsage, usage, totals, clearTotals, steps *sql.Stmt
}

// totalsSQL keeps a job's totals (migration 007) once it has ended and
// none of its attempts or usage rows is open: the sums over its attempts;
// clearTotalsSQL, run when totalsSQL changed no row, makes them NULL (a
// job back to pending, whose next attempt adds to them). One statement
// with the condition in a CASE for each column (up to session 15) ran it
// three times, nine subqueries a job, and was 58 % of RecordJobs (7 % of
// the controller's CPU) in a live burst: BenchmarkRecordJobTotals 68-76
// cpu-µs per ended job recorded with it, 29-30 with these (docs/fleet.md,
// "Session 15 — ctlcpu"). TestJobTotalsMatchOneStatement checks them
// against it.
var totalsSQL = `UPDATE jobs SET
	gpu_seconds = (SELECT COALESCE(SUM((u.end_time - u.start_time) * u.fraction), 0) FROM usage u WHERE u.job_id = ?1),
	cpu_seconds = (SELECT COALESCE(SUM((a.end_time - a.start_time) * a.cpus), 0) FROM attempts a WHERE a.job_id = ?1),
	slice_seconds = (SELECT COALESCE(SUM(u.end_time - u.start_time), 0) FROM usage u WHERE u.job_id = ?1 AND u.mig_profile != '')
WHERE id = ?1 AND state IN ` + terminalStates + `
	AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = ?1 AND a.end_time IS NULL)
	AND NOT EXISTS (SELECT 1 FROM usage u WHERE u.job_id = ?1 AND u.end_time IS NULL)`

const clearTotalsSQL = `UPDATE jobs SET gpu_seconds = NULL, cpu_seconds = NULL, slice_seconds = NULL
WHERE id = ?1 AND (gpu_seconds IS NOT NULL OR cpu_seconds IS NOT NULL OR slice_seconds IS NOT NULL)`

// prepareRecord prepares RecordJobs' statements once, on the writer's
// connection (Open): preparing the six in every transaction was a tenth
// of the recorder's CPU in gpud loadtest's burst, whose batches are small.
func prepareRecord(ctx context.Context, w *sql.DB) (*recordStmts, error) {
	var st recordStmts
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&st.newJob, insertNewJobSQL},
		{&st.job, upsertJobSQL},
		{&st.attempt, upsertAttemptSQL},
		{&st.delUsage, `DELETE FROM usage WHERE job_id = ? AND attempt = ?`},
		{&st.totals, totalsSQL},
		{&st.clearTotals, clearTotalsSQL},
		{&st.steps, upsertStepSQL},
		{&st.usage, `INSERT INTO usage (job_id, attempt, node, gpu_uuid, gpu_model, mig_profile,
			fraction, gpu_seconds, billed_units, start_time, end_time, account, user) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`},
	} {
		s, err := w.PrepareContext(ctx, p.sql)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("prepare statement: %w", err)
		}
		*p.dst = s
	}
	return &st, nil
}

// in returns the statements bound to tx (closed with it, or by close).
func (st *recordStmts) in(ctx context.Context, tx *sql.Tx) *recordStmts {
	return &recordStmts{newJob: tx.StmtContext(ctx, st.newJob), job: tx.StmtContext(ctx, st.job), attempt: tx.StmtContext(ctx, st.attempt),
		delUsage: tx.StmtContext(ctx, st.delUsage), usage: tx.StmtContext(ctx, st.usage),
		totals: tx.StmtContext(ctx, st.totals), clearTotals: tx.StmtContext(ctx, st.clearTotals), steps: tx.StmtContext(ctx, st.steps)}
}

func (st *recordStmts) close() {
	for _, s := range []*sql.Stmt{st.newJob, st.job, st.attempt, st.delUsage, st.usage, st.totals, st.clearTotals, st.steps} {
		if s != nil {
			_ = s.Close() // closing a prepared statement only frees memory
		}
	}
}

// recordJob writes j's job row, steps, attempt and usage rows; totalled
// says its totals are written too (a new row whose totals newTotals
// computed), so RecordJobs runs no totals statement for it.
func (db *DB) recordJob(ctx context.Context, st *recordStmts, j *spec.Job) (totalled bool, err error) {
	r := &j.Resources
	nodes, gpus := j.Nodes, j.GPUs
	cpus, mem := r.CPUsPerNode*max(r.Nodes, 1), r.MemMiB*int64(max(r.Nodes, 1))
	gpuCount := r.GPUsPerNode * max(r.Nodes, 1)
	if gpuCount == 0 && r.TotalGPUs > 0 {
		gpuCount = r.TotalGPUs
	}
	if gpuCount == 0 && r.GPUFraction > 0 {
		gpuCount = max(r.Nodes, 1)
	}
	if a := j.Alloc; a != nil {
		// The allocation is what the job really holds; the request is only
		// what it asked for.
		nodes, gpus, cpus, mem, gpuCount = nil, nil, 0, 0, 0
		for _, n := range a.Nodes {
			nodes = append(nodes, n.Node)
			for _, d := range devices(&n) {
				gpus = append(gpus, d.id)
			}
			cpus += n.CPUs
			mem += n.MemMiB
			gpuCount += len(n.GPUs) + len(n.MIG)
		}
		if len(j.GPUs) > 0 {
			gpus = j.GPUs
		}
	}
	model := r.GPUModel
	if db.opts.modelOf != nil && len(gpus) > 0 {
		if m := db.opts.modelOf(gpus[0]); m != "" {
			model = m
		}
	}
	pullMS, pullBytes := pullCost(j.Alloc)
	eligible := j.SubmitTime.Time
	if j.BeginTime.After(eligible) {
		eligible = j.BeginTime.Time
	}
	span := spanOf(j)
	tot := db.newTotals(j, span, cpus)
	// Every argument is already a driver value (int64, float64, string,
	// nil): database/sql converts anything else by reflection, a boxed
	// copy per argument (~15 % of RecordJobs; docs/fleet.md "Session 18 —
	// commit").
	args := []any{int64(j.ID), j.Name, j.User, int64(j.UID), j.Account, j.Partition,
		j.QOS, string(j.State), j.Reason, int64(j.ExitCode), int64(j.Signal), unixArg(j.SubmitTime.Time),
		unixArg(eligible), unixArg(j.StartTime.Time), unixArg(j.EndTime.Time),
		int64(j.TimeLimit.Std() / time.Second), strings.Join(nodes, ","), strings.Join(gpus, ","),
		int64(gpuCount), model, r.GPUProfile, r.GPUFraction, int64(cpus), mem, int64(j.Attempt), j.WorkDir,
		int64(j.ArrayJobID), int64(j.ArrayTaskID), j.WCKey, int64(ntasks(j)), request(r), j.Depend, int64(j.Nice), int64(arrayMax(j)), pullMS, pullBytes,
		int64(j.HetJobID), int64(j.HetOffset), j.Reservation,
		floatArg(tot.gpu), floatArg(tot.cpu), floatArg(tot.slice)}
	res, err := st.newJob.ExecContext(ctx, args...)
	if err != nil {
		return false, fmt.Errorf("insert job row: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("insert job row: %w", err)
	}
	// A new row: no attempt or usage row of the job can exist (foreign
	// keys), so this record's are all there will be.
	isNew := n == 1
	if !isNew {
		if _, err := st.job.ExecContext(ctx, args[:len(args)-3]...); err != nil {
			return false, fmt.Errorf("upsert job row: %w", err)
		}
	}
	// A stale job row (the upsert kept the newer stored one) may still carry
	// the only record of its attempt's end, so the attempt is written anyway
	// under its own staleness rule.
	if j.Alloc == nil {
		return isNew && tot.exact, nil
	}
	if len(j.Steps) > 0 {
		if err := recordSteps(ctx, st.steps, j.ID, span.attempt, j.Steps); err != nil {
			return false, err
		}
	}
	if err := db.recordAttempt(ctx, st, j, span, nodes, cpus, mem, isNew); err != nil {
		return false, err
	}
	return isNew && tot.exact, nil
}

// span is what recordAttempt writes of j's attempt: its number, whether
// it started (if not, nothing is written), its start and its end (NULL:
// open).
type span struct {
	attempt int
	started bool
	start   int64
	end     sql.NullInt64
}

func spanOf(j *spec.Job) span {
	a := j.Alloc
	if a == nil {
		return span{}
	}
	s := span{attempt: a.Attempt}
	if s.attempt == 0 {
		s.attempt = j.Attempt
	}
	// The job's start is when its container started (rank 0's report);
	// the allocation's is when the controller placed it, a moment before.
	// Usage runs from the former, as Elapsed does, when it is this
	// attempt's: gpu_hours is then allocation × elapsed.
	start := a.StartTime.Time
	if js := j.StartTime.Time; start.IsZero() || !js.Before(start) {
		start = js
	}
	if start.IsZero() {
		return s // placed but not started: nothing used yet
	}
	s.started, s.start = true, start.Unix()
	// EndTime before this attempt's start belongs to an earlier attempt.
	if !j.EndTime.IsZero() && j.EndTime.Unix() >= s.start {
		s.end = sql.NullInt64{Int64: j.EndTime.Unix(), Valid: true}
	}
	return s
}

// totals are a job row's gpu_seconds, cpu_seconds and slice_seconds.
type totals struct {
	gpu, cpu, slice sql.NullFloat64
	// exact: they are what totalsSQL and clearTotalsSQL would leave on a
	// new row after this record's attempt and usage rows are written.
	exact bool
}

// newTotals is what totalsSQL (or clearTotalsSQL) makes of a job row
// that did not exist before this record, computed here instead of by a
// statement: the only attempt and usage rows of the job are then the ones
// recordAttempt writes of span (cpus each its attempt's). The sums are
// NULL unless the job is terminal with its attempt ended. SQLite's SUM
// of several REAL products may round differently from a sum here, so
// several shared GPUs whose products are not whole numbers are left to
// the statement (exact false). TestNewJobTotalsMatchOneStatement checks
// these against the statement.
func (db *DB) newTotals(j *spec.Job, s span, cpus int) totals {
	if !j.State.Terminal() {
		return totals{exact: true}
	}
	zero := sql.NullFloat64{Valid: true}
	if j.Alloc == nil || !s.started {
		return totals{gpu: zero, cpu: zero, slice: zero, exact: true} // no attempt: sums of nothing
	}
	if !s.end.Valid {
		return totals{exact: true} // the attempt is open
	}
	d := s.end.Int64 - s.start
	var gpu float64
	terms, whole := 0, true
	for _, n := range j.Alloc.Nodes {
		for _, dev := range devices(&n) {
			model := j.Resources.GPUModel
			if db.opts.modelOf != nil {
				if m := db.opts.modelOf(dev.gpu); m != "" {
					model = m
				}
			}
			t := float64(d) * db.fraction(&j.Resources, &n, model)
			gpu += t
			terms++
			whole = whole && t == math.Trunc(t) && math.Abs(t) < 1<<52
		}
	}
	if terms > 1 && !whole {
		return totals{} // the statement sums them
	}
	slice := int64(0)
	if j.Resources.GPUProfile != "" {
		slice = d * int64(terms)
	}
	return totals{
		gpu:   sql.NullFloat64{Float64: gpu, Valid: true},
		cpu:   sql.NullFloat64{Float64: float64(d * int64(cpus)), Valid: true},
		slice: sql.NullFloat64{Float64: float64(slice), Valid: true},
		exact: true,
	}
}

// recordAttempt writes the attempt of j.Alloc (s) and its usage rows, if
// it has started. isNew: the job's row was new in this transaction, so no
// usage row of it can exist to replace.
func (db *DB) recordAttempt(ctx context.Context, st *recordStmts, j *spec.Job, s span, nodes []string, cpus int, mem int64, isNew bool) error {
	a := j.Alloc
	attempt, startS, end := s.attempt, s.start, s.end
	if !s.started {
		return nil // placed but not started: nothing used yet
	}
	// The controller records a requeued attempt with its job back in the
	// queue (PENDING). LostWork is the latest requeue's and stays on the
	// job, so only the requeued attempt's record may claim it.
	state, lost := j.State, int64(0)
	if state == spec.StatePending || state == spec.StateRequeued {
		state, lost = spec.StateRequeued, int64(j.LostWork.Std()/time.Second)
	}
	var ckptSeq, ckptTime sql.NullInt64
	if lc := j.LastCheckpoint; lc.Seq > 0 && lc.Attempt == attempt {
		ckptSeq, ckptTime = sql.NullInt64{Int64: int64(lc.Seq), Valid: true}, unixOrNull(lc.Time.Time)
	}
	pullMS, pullBytes := pullCost(a)
	res, err := st.attempt.ExecContext(ctx, int64(j.ID), int64(attempt), a.ID, strings.Join(nodes, ","), int64(cpus), mem, startS, intArg(end),
		string(state), j.Reason, intArg(ckptSeq), intArg(ckptTime), lost, pullMS, pullBytes)
	if err != nil {
		return fmt.Errorf("upsert attempt %d: %w", attempt, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("upsert attempt %d: %w", attempt, err)
	} else if n == 0 {
		return nil // stale record of an attempt that has since ended
	}
	// Replace rather than upsert the usage rows, so a device no longer in
	// the allocation does not linger.
	if !isNew {
		if _, err := st.delUsage.ExecContext(ctx, int64(j.ID), int64(attempt)); err != nil {
			return fmt.Errorf("replace usage of attempt %d: %w", attempt, err)
		}
	}
	for _, n := range a.Nodes {
		for _, d := range devices(&n) {
			uuid := d.id
			model := j.Resources.GPUModel
			if db.opts.modelOf != nil {
				if m := db.opts.modelOf(d.gpu); m != "" {
					model = m
				}
			}
			frac := db.fraction(&j.Resources, &n, model)
			var gpuSec, billed float64
			if end.Valid {
				gpuSec = float64(end.Int64-startS) * frac
				billed = gpuSec * db.opts.billingWeight(model, j.Resources.GPUProfile)
			}
			if _, err := st.usage.ExecContext(ctx, int64(j.ID), int64(attempt), n.Node, uuid, model,
				j.Resources.GPUProfile, frac, gpuSec, billed, startS, intArg(end), j.Account, j.User); err != nil {
				return fmt.Errorf("insert usage of attempt %d for %s on %s: %w", attempt, uuid, n.Node, err)
			}
		}
	}
	return nil
}

// pullCost is what a's image cost before its task started: the slowest
// node's wait (the job starts when every node holds its image) and the
// bytes all its nodes downloaded.
func pullCost(a *spec.Alloc) (ms, bytes int64) {
	if a == nil {
		return 0, 0
	}
	for _, n := range a.Nodes {
		ms, bytes = max(ms, n.PullMS), bytes+n.PullBytes
	}
	return ms, bytes
}

// device is one allocated device: a whole or shared GPU, or a MIG slice
// (id its MIG UUID, or parent:start before the node created it) on GPU.
type device struct{ id, gpu string }

func devices(n *spec.NodeAlloc) []device {
	out := make([]device, 0, len(n.GPUs)+len(n.MIG))
	for _, u := range n.GPUs {
		out = append(out, device{u, u})
	}
	for _, m := range n.MIG {
		id := m.UUID
		if id == "" {
			id = m.GPU + ":" + strconv.Itoa(m.Placement.Start)
		}
		out = append(out, device{id, m.GPU})
	}
	return out
}

// fraction is the share of a whole GPU one allocated device of n stands for.
func (db *DB) fraction(r *spec.Resources, n *spec.NodeAlloc, model string) float64 {
	switch {
	case n.GPUFraction > 0:
		return n.GPUFraction
	case r.GPUProfile != "":
		return db.opts.sliceFraction(model, r.GPUProfile)
	case r.GPUFraction > 0:
		return r.GPUFraction
	}
	return 1
}

// DefaultSliceFraction is a MIG slice's share of its GPU from the profile's
// compute slices: "3g.40gb" is 3 of the 7 slices of an A100/H100/H200/B200,
// "2g.12gb" 2 of the 4 of an A30. A profile it cannot read counts as a
// whole GPU, so unknown hardware is over- rather than under-billed.
func DefaultSliceFraction(model, profile string) float64 {
	g, _, ok := strings.Cut(profile, "g.")
	n, err := strconv.Atoi(g)
	if !ok || err != nil || n <= 0 {
		return 1
	}
	total := 7
	if strings.Contains(strings.ToLower(model), "a30") {
		total = 4
	}
	return min(float64(n)/float64(total), 1)
}

// unixArg, intArg and floatArg are statement arguments as database/sql
// passes them to the driver as they are: int64, float64 or nil (NULL).
func unixArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.Unix()
}

func intArg(n sql.NullInt64) any {
	if !n.Valid {
		return nil
	}
	return n.Int64
}

func floatArg(n sql.NullFloat64) any {
	if !n.Valid {
		return nil
	}
	return n.Float64
}

func unixOrNull(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.Unix(), Valid: true}
}

// ntasks is the job's task count as the job asked for it: --ntasks, or
// tasks per node times nodes; 0 when it gave neither.
func ntasks(j *spec.Job) int {
	t := j.Tasks
	switch {
	case t.NTasks > 0:
		return t.NTasks
	case t.NTasksPerNode > 0:
		return t.NTasksPerNode * max(j.Resources.Nodes, 1)
	}
	return 0
}

// request is the job's request as JSON (gpud simulate --from-accounting
// replays it); a request that cannot be encoded is left out, not fatal.
func request(r *spec.Resources) string {
	return string(r.AppendJSON(nil))
}

// arrayMax is the %MAX of an array task's --array, 0 when none.
func arrayMax(j *spec.Job) int {
	if j.ArrayJobID == 0 {
		return 0
	}
	_, lim, ok := strings.Cut(j.Array, "%")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(lim)
	return n
}
