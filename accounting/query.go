package accounting

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Filter selects jobs, with sacct's semantics. Empty lists and zero times
// match everything.
type Filter struct {
	IDs        []spec.JobID
	Users      []string
	Accounts   []string
	Partitions []string
	States     []spec.JobState
	// Start and End select jobs that were eligible or running at some
	// instant in [Start, End]: eligible (submitted and past --begin) no later
	// than End, and not ended before Start. Summary also clips usage to it.
	Start, End time.Time
	// Limit caps the number of records Jobs returns (the lowest job IDs);
	// 0 means no cap. Summary ignores it.
	Limit int
	// NoUsage leaves out what Jobs sums from the usage, attempts and
	// sample tables (GPUHours, CPUHours, SliceHours, GPUUtil, EnergyKWh,
	// CO2Kg, Cost: zero in the records), for callers that print none of
	// them (sacct): six sub-selects a job. Summary ignores it.
	NoUsage bool
}

// Record is one job as accounting remembers it (gpuq acct, sacct); it is
// the API's type, which GET /v1/accounting/jobs sends inside api.AcctJob.
type Record = api.AcctRecord

// Group keys for Summary.
const (
	GroupByUser      = "user"
	GroupByAccount   = "account"
	GroupByPartition = "partition"
	GroupByGPUModel  = "gpu_model"
)

var groupColumns = map[string]string{
	GroupByUser:      "j.user",
	GroupByAccount:   "j.account",
	GroupByPartition: `j."partition"`,
	GroupByGPUModel:  "j.gpu_model",
}

// SummaryRow is one group of a Summary (gpuq report); it is the API's
// type.
type SummaryRow = api.AcctSummaryRow

// IdleUtilPct is the utilisation under which a sampled GPU counts as idle
// in IdleGPUHours.
const IdleUtilPct = 5

// where builds the WHERE clause of f over jobs j.
func (f *Filter) where() (string, []any) {
	var conds []string
	var args []any
	in := func(col string, n int, arg func(i int) any) {
		if n == 0 {
			return
		}
		conds = append(conds, col+" IN ("+strings.TrimSuffix(strings.Repeat("?,", n), ",")+")")
		for i := range n {
			args = append(args, arg(i))
		}
	}
	in("j.id", len(f.IDs), func(i int) any { return int64(f.IDs[i]) })
	in("j.user", len(f.Users), func(i int) any { return f.Users[i] })
	in("j.account", len(f.Accounts), func(i int) any { return f.Accounts[i] })
	in(`j."partition"`, len(f.Partitions), func(i int) any { return f.Partitions[i] })
	in("j.state", len(f.States), func(i int) any { return string(f.States[i]) })
	if !f.End.IsZero() {
		conds = append(conds, "j.eligible_time <= ?")
		args = append(args, f.End.Unix())
	}
	if !f.Start.IsZero() {
		conds = append(conds, "(j.end_time IS NULL OR j.end_time >= ?)")
		args = append(args, f.Start.Unix())
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// usageSQL and cpuSQL sum a job's GPU- and CPU-seconds over its attempts,
// clipped to [?, ?] and counting a running attempt up to ?now. Their three
// parameters are now, window start, window end.
const (
	usageSQL = `(SELECT COALESCE(SUM(MAX(0, MIN(COALESCE(u.end_time, ?1), ?3) - MAX(u.start_time, ?2)) * u.fraction), 0)
		FROM usage u WHERE u.job_id = j.id)`
	cpuSQL = `(SELECT COALESCE(SUM(MAX(0, MIN(COALESCE(a.end_time, ?1), ?3) - MAX(a.start_time, ?2)) * a.cpus), 0)
		FROM attempts a WHERE a.job_id = j.id)`
	sliceSQL = `(SELECT COALESCE(SUM(MAX(0, MIN(COALESCE(u.end_time, ?1), ?3) - MAX(u.start_time, ?2))), 0)
		FROM usage u WHERE u.job_id = j.id AND u.mig_profile != '')`
	// Samples count when they end inside the window.
	utilSQL = `(SELECT COALESCE(SUM(s.gpu_util_avg * s.seconds * s.gpus), 0) FROM usage_samples s
		WHERE s.job_id = j.id AND s.end_time BETWEEN ?2 AND ?3)`
	utilWeightSQL = `(SELECT COALESCE(SUM(s.seconds * s.gpus), 0) FROM usage_samples s
		WHERE s.job_id = j.id AND s.end_time BETWEEN ?2 AND ?3)`
	energySQL = `(SELECT COALESCE(SUM(s.energy_j), 0) FROM usage_samples s
		WHERE s.job_id = j.id AND s.end_time BETWEEN ?2 AND ?3)`
	// rssSQL is the last attempt's peak memory per node (memory.peak
	// only grows, so a node's newest sample has its highest): the
	// highest, the mean over the nodes that reported one, and the node
	// of the highest.
	rssSQL = `(SELECT COALESCE(MAX(p), 0) FROM (SELECT MAX(s.mem_peak_mib) AS p FROM usage_samples s
		WHERE s.job_id = j.id AND s.attempt = j.attempts AND s.mem_peak_mib > 0 GROUP BY s.node)),
		(SELECT COALESCE(AVG(p), 0) FROM (SELECT MAX(s.mem_peak_mib) AS p FROM usage_samples s
		WHERE s.job_id = j.id AND s.attempt = j.attempts AND s.mem_peak_mib > 0 GROUP BY s.node)),
		COALESCE((SELECT s.node FROM usage_samples s WHERE s.job_id = j.id AND s.attempt = j.attempts AND s.mem_peak_mib > 0
		ORDER BY s.mem_peak_mib DESC, s.node LIMIT 1), '')`
)

var idleSQL = `(SELECT COALESCE(SUM(s.seconds * s.gpus), 0) FROM usage_samples s
	WHERE s.job_id = j.id AND s.end_time BETWEEN ?2 AND ?3 AND s.gpu_util_avg < ` + strconv.Itoa(IdleUtilPct) + `)`

// joules per kWh
const jPerKWh = 3.6e6

// costOf is the price of gpuSec GPU-seconds of model.
func (db *DB) costOf(model string, gpuSec float64) float64 {
	if db.opts.price == nil {
		return 0
	}
	return db.opts.price(model) * gpuSec / 3600
}

// co2Of is the kilograms of CO2e of energyJ joules.
func (db *DB) co2Of(energyJ float64) float64 {
	return energyJ / jPerKWh * db.opts.gridGPerKWh / 1000
}

// Jobs lists the jobs f selects, ordered by job ID.
func (db *DB) Jobs(ctx context.Context, f Filter) ([]Record, error) {
	now := db.opts.now().Unix()
	where, args := f.where()
	// Records report whole jobs, so usage is not clipped to the window.
	ws, we := bounds(time.Time{}, time.Time{})
	usage := usageSQL + `, ` + cpuSQL + `, ` + sliceSQL + `, ` + utilSQL + `, ` + utilWeightSQL + `, ` + energySQL + `, ` + rssSQL
	first := 4
	if f.NoUsage {
		usage, first = `0, 0, 0, 0, 0, 0, 0, 0, ''`, 1 // no sub-select uses ?1-?3
	} else {
		args = append([]any{now, ws, we}, args...)
	}
	q := `SELECT j.id, j.name, j.user, j.uid, j.account, j."partition", j.qos, j.state, j.reason,
		j.exit_code, j.signal, j.submit_time, j.eligible_time, j.start_time, j.end_time, j.time_limit,
		j.nodes, j.gpus, j.gpu_count, j.gpu_model, j.gpu_profile, j.gpu_fraction, j.cpus, j.mem_mib,
		j.attempts, j.work_dir, j.array_job_id, j.array_task_id, j.wckey, j.ntasks,
		j.request, j.dependency, j.nice, j.array_max, j.pull_ms, j.pull_bytes, j.het_job_id, j.het_offset, ` + usage + `
	FROM jobs j` + renumber(where, first) + ` ORDER BY j.id`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list accounted jobs: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var (
			r                        Record
			id                       int64
			state, nodes, gpus       string
			submit, elig, start, en  sql.NullInt64
			limit                    int64
			gpuSec, cpuSec, sliceSec float64
			util, utilW, energyJ     float64
			arrayID, hetID           int64
			req                      string
			pullMS                   int64
		)
		if err := rows.Scan(&id, &r.Name, &r.User, &r.UID, &r.Account, &r.Partition, &r.QOS, &state,
			&r.Reason, &r.ExitCode, &r.Signal, &submit, &elig, &start, &en, &limit, &nodes, &gpus,
			&r.GPUCount, &r.GPUModel, &r.GPUProfile, &r.GPUFraction, &r.CPUs, &r.MemMiB, &r.Attempts,
			&r.WorkDir, &arrayID, &r.ArrayTaskID, &r.WCKey, &r.NTasks, &req, &r.Dependency, &r.Nice, &r.ArrayMax, &pullMS, &r.ImagePullBytes, &hetID, &r.HetOffset, &gpuSec, &cpuSec, &sliceSec, &util, &utilW, &energyJ,
			&r.MaxRSSMiB, &r.AveRSSMiB, &r.MaxRSSNode); err != nil {
			return nil, fmt.Errorf("list accounted jobs: read row: %w", err)
		}
		r.ID, r.State, r.ArrayJobID, r.HetJobID = spec.JobID(id), spec.JobState(state), spec.JobID(arrayID), spec.JobID(hetID)
		r.SubmitTime, r.EligibleTime = fromUnix(submit), fromUnix(elig)
		r.StartTime, r.EndTime = fromUnix(start), fromUnix(en)
		r.TimeLimit = spec.Duration(time.Duration(limit) * time.Second)
		r.Nodes, r.GPUs = splitList(nodes), splitList(gpus)
		if req != "" {
			var res spec.Resources
			if json.Unmarshal([]byte(req), &res) == nil {
				r.Request = &res
			}
		}
		r.Elapsed = elapsed(r.State, start, en, now)
		r.ImagePullSeconds = float64(pullMS) / 1000
		r.GPUHours, r.CPUHours, r.SliceHours = gpuSec/3600, cpuSec/3600, sliceSec/3600
		if utilW > 0 {
			r.GPUUtil = util / utilW
		}
		r.EnergyKWh, r.CO2Kg, r.Cost = energyJ/jPerKWh, db.co2Of(energyJ), db.costOf(r.GPUModel, gpuSec)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list accounted jobs: %w", err)
	}
	return out, nil
}

// Summary totals the jobs f selects by groupBy (one of the GroupBy
// constants), ordered by group. Like sreport, usage is clipped to
// [f.Start, f.End]: a job that ran across the window's edge counts only its
// hours inside it.
func (db *DB) Summary(ctx context.Context, f Filter, groupBy string) ([]SummaryRow, error) {
	col, ok := groupColumns[groupBy]
	if !ok {
		return nil, spec.Errorf(spec.ErrInvalid, "summarise accounted jobs: group by %q is not one of user, account, partition, gpu_model", groupBy)
	}
	now := db.opts.now().Unix()
	ws, we := bounds(f.Start, f.End)
	where, args := f.where()
	args = append([]any{now, ws, we}, args...)
	// Cost needs each job's model, so the rows are grouped by model too
	// and folded here.
	// A job wholly inside the window (submitted in it, ended in it) counts
	// its totals from its row; others sum their attempts, clipped.
	whole := func(col, sum string) string {
		return `CASE WHEN j.` + col + ` IS NOT NULL AND j.submit_time >= ?2 AND j.end_time <= ?3 THEN j.` + col + ` ELSE ` + sum + ` END`
	}
	q := `SELECT g, m, COUNT(*), SUM(gs), SUM(cs), SUM(ss), SUM(es), SUM(isec) FROM (SELECT ` + col + ` AS g, j.gpu_model AS m,
		` + whole("gpu_seconds", usageSQL) + ` AS gs, ` + whole("cpu_seconds", cpuSQL) + ` AS cs,
		` + whole("slice_seconds", sliceSQL) + ` AS ss, ` + energySQL + ` AS es, ` + idleSQL + ` AS isec
	FROM jobs j` + renumber(where, 4) + `) GROUP BY g, m ORDER BY g, m`
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("summarise accounted jobs by %s: %w", groupBy, err)
	}
	defer rows.Close()
	var out []SummaryRow
	for rows.Next() {
		var (
			g, model                      string
			n                             int
			gpuSec, cpuSec, sliceSec, enJ float64
			idleSec                       float64
		)
		if err := rows.Scan(&g, &model, &n, &gpuSec, &cpuSec, &sliceSec, &enJ, &idleSec); err != nil {
			return nil, fmt.Errorf("summarise accounted jobs by %s: read row: %w", groupBy, err)
		}
		if len(out) == 0 || out[len(out)-1].Group != g {
			out = append(out, SummaryRow{Group: g})
		}
		s := &out[len(out)-1]
		s.Jobs += n
		s.GPUHours += gpuSec / 3600
		s.CPUHours += cpuSec / 3600
		s.SliceHours += sliceSec / 3600
		s.EnergyKWh += enJ / jPerKWh
		s.CO2Kg += db.co2Of(enJ)
		s.Cost += db.costOf(model, gpuSec)
		s.IdleGPUHours += idleSec / 3600
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("summarise accounted jobs by %s: %w", groupBy, err)
	}
	return out, nil
}

// renumber turns the plain ? placeholders of a WHERE clause into ?N, ?N+1,
// ..., because SQLite numbers a bare ? after the highest ?N seen so far,
// and the sub-selects before it use ?1-?3.
func renumber(where string, first int) string {
	var b strings.Builder
	n := first
	for _, c := range where {
		if c == '?' {
			fmt.Fprintf(&b, "?%d", n)
			n++
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func elapsed(state spec.JobState, start, end sql.NullInt64, now int64) int64 {
	switch {
	case !start.Valid:
		return 0
	case end.Valid && end.Int64 >= start.Int64:
		return end.Int64 - start.Int64
	case state.Active():
		return max(0, now-start.Int64)
	}
	return 0
}

func fromUnix(v sql.NullInt64) spec.Time {
	if !v.Valid {
		return spec.Time{}
	}
	return spec.NewTime(time.Unix(v.Int64, 0).UTC())
}

// splitList reads a comma list; empty is an empty, non-nil list so JSON
// shows [] rather than null.
func splitList(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}
