package slurm

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/cli/slurmtime"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

var sacctSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "help", Short: 'h'}, // in this command -h is --help
	{Long: "jobs", Short: 'j', Arg: getopt.Required},
	{Long: "format", Short: 'o', Arg: getopt.Required},
	{Long: "parsable2", Short: 'P'},
	{Long: "parsable", Short: 'p'},
	{Long: "noheader", Short: 'n'},
	{Long: "allocations", Short: 'X'},
	{Long: "starttime", Short: 'S', Arg: getopt.Required},
	{Long: "endtime", Short: 'E', Arg: getopt.Required},
	{Long: "user", Short: 'u', Arg: getopt.Required},
	{Long: "state", Short: 's', Arg: getopt.Required},
	{Long: "allusers", Short: 'a'},
	{Long: "accounts", Short: 'A', Arg: getopt.Required},
	{Long: "partition", Short: 'r', Arg: getopt.Required},
	{Long: "name", Arg: getopt.Required},
	{Long: "json"},
	{Long: "brief", Short: 'b'},
	{Long: "long", Short: 'l'},
	{Long: "duplicates", Short: 'D'},
	{Long: "units", Arg: getopt.Required},
	{Long: "delimiter", Arg: getopt.Required},
}, common...)}

// sacctField is one --format field: Slurm's name, its default width, its
// value.
type sacctField struct {
	name  string
	width int
	value func(j *api.AcctJob) string
}

func tres(j *api.AcctJob) string {
	s := fmt.Sprintf("billing=%d,cpu=%d", j.CPUs, j.CPUs)
	if j.GPUCount > 0 {
		if j.GPUModel != "" {
			s += fmt.Sprintf(",gres/gpu:%s=%d", j.GPUModel, j.GPUCount)
		}
		s += fmt.Sprintf(",gres/gpu=%d", j.GPUCount)
	}
	if j.MemMiB > 0 {
		s += ",mem=" + format.MiB(j.MemMiB)
	}
	return s + fmt.Sprintf(",node=%d", max(len(j.Nodes), 1))
}

var sacctFields = []sacctField{
	{"JobID", 12, func(j *api.AcctJob) string {
		if j.HetJobID != 0 { // a heterogeneous job's component: N+K
			return format.AcctJobID(strconv.FormatUint(uint64(j.HetJobID), 10)+"+"+strconv.Itoa(j.HetOffset), j)
		}
		if j.ArrayJobID != 0 {
			return format.AcctJobID(strconv.FormatUint(uint64(j.ArrayJobID), 10)+"_"+strconv.Itoa(j.ArrayTaskID), j)
		}
		return format.AcctJobID(strconv.FormatUint(uint64(j.ID), 10), j)
	}},
	{"JobIDRaw", 12, func(j *api.AcctJob) string { return format.AcctJobID(strconv.FormatUint(uint64(j.ID), 10), j) }},
	{"JobName", 10, func(j *api.AcctJob) string { return j.Name }},
	{"State", 10, func(j *api.AcctJob) string { return string(j.State) }},
	{"ExitCode", 8, func(j *api.AcctJob) string { return format.StateExitCode(j.State, j.ExitCode, j.Signal) }},
	{"Elapsed", 10, func(j *api.AcctJob) string { return format.AcctDuration(j.Elapsed) }},
	{"ElapsedRaw", 10, func(j *api.AcctJob) string { return strconv.FormatInt(j.Elapsed, 10) }},
	{"NodeList", 15, func(j *api.AcctJob) string {
		if len(j.Nodes) == 0 {
			return "None assigned"
		}
		return hostlist.Compress(j.Nodes)
	}},
	{"AllocTRES", 10, func(j *api.AcctJob) string {
		if j.StartTime.IsZero() {
			return ""
		}
		return tres(j)
	}},
	{"ReqTRES", 10, tres},
	{"Account", 10, func(j *api.AcctJob) string { return j.Account }},
	{"User", 9, func(j *api.AcctJob) string { return j.User }},
	{"UID", 6, func(j *api.AcctJob) string { return strconv.FormatUint(uint64(j.UID), 10) }},
	{"Partition", 10, func(j *api.AcctJob) string { return j.Partition }},
	{"QOS", 10, func(j *api.AcctJob) string { return j.QOS }},
	{"Submit", 19, func(j *api.AcctJob) string { return format.AcctTime(j.SubmitTime) }},
	{"Eligible", 19, func(j *api.AcctJob) string { return format.AcctTime(j.EligibleTime) }},
	{"Start", 19, func(j *api.AcctJob) string { return format.AcctTime(j.StartTime) }},
	{"End", 19, func(j *api.AcctJob) string { return format.AcctTime(j.EndTime) }},
	{"AllocCPUS", 10, func(j *api.AcctJob) string { return strconv.Itoa(j.CPUs) }},
	{"ReqCPUS", 8, func(j *api.AcctJob) string { return strconv.Itoa(j.CPUs) }},
	{"NNodes", 8, func(j *api.AcctJob) string { return strconv.Itoa(max(len(j.Nodes), 1)) }},
	{"NTasks", 8, func(j *api.AcctJob) string {
		if j.NTasks == 0 {
			return ""
		}
		return strconv.Itoa(j.NTasks)
	}},
	{"ReqMem", 10, func(j *api.AcctJob) string { return format.MiB(j.MemMiB) }},
	{"Timelimit", 10, func(j *api.AcctJob) string {
		if j.TimeLimit == 0 {
			return "UNLIMITED"
		}
		return string(format.AppendElapsed(nil, j.TimeLimit.Std()))
	}},
	{"WorkDir", 10, func(j *api.AcctJob) string { return j.WorkDir }},
	{"Reason", 10, func(j *api.AcctJob) string { return orDefault(j.Reason, "None") }},
	{"WCKey", 10, func(j *api.AcctJob) string { return j.WCKey }},
	{"MaxRSS", 10, func(j *api.AcctJob) string { return rss(j.MaxRSSMiB) }},
	{"AveRSS", 10, func(j *api.AcctJob) string { return rss(j.AveRSSMiB) }},
	{"MaxRSSNode", 10, func(j *api.AcctJob) string { return j.MaxRSSNode }},
	// gpud's own: what the job's container image cost before its task
	// started (docs/pyxis.md), in the forms of Slurm's TotalCPU and
	// MaxDiskRead.
	{"ImagePullTime", 13, func(j *api.AcctJob) string { return format.CPUTime(j.ImagePullSeconds) }},
	{"ImagePullBytes", 14, func(j *api.AcctJob) string { return format.Bytes(j.ImagePullBytes) }},
}

// rss is a memory size as sacct prints MaxRSS: in KiB, converted to a
// larger unit only where it divides exactly (sacct's default
// CONVERT_NUM_UNIT_EXACT: "2063608K", "2M"); "" when unknown.
func rss(mib float64) string {
	if mib <= 0 {
		return ""
	}
	n := int64(mib*1024 + 0.5)
	units := "KMGTP"
	i := 0
	for n >= 1024 && n%1024 == 0 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return strconv.FormatInt(n, 10) + units[i:i+1]
}

// sacctNeeds are the accounting record fields (api.AcctJob's JSON keys)
// each --format field reads, step rows included (a step's AllocCPUS
// shares the job's CPUs over its nodes): sacct asks the controller for
// these only (AcctFilter.Fields). TestSacctNeeds checks each field's value
// against the complete record's.
var sacctNeeds = map[string][]string{
	"JobID": nil, "JobIDRaw": nil, "JobName": {"name"}, "State": {"state"},
	"ExitCode": {"state", "exit_code", "exit_signal"}, "Elapsed": {"elapsed"}, "ElapsedRaw": {"elapsed"},
	"NodeList":  {"nodes"},
	"AllocTRES": {"start_time", "cpus", "gpu_count", "gpu_model", "mem_mib", "nodes"},
	"ReqTRES":   {"cpus", "gpu_count", "gpu_model", "mem_mib", "nodes"},
	"Account":   {"account"}, "User": {"user"}, "UID": {"uid"}, "Partition": {"partition"}, "QOS": {"qos"},
	"Submit": {"submit_time"}, "Eligible": {"eligible_time"}, "Start": {"start_time"}, "End": {"end_time"},
	"AllocCPUS": {"cpus", "nodes"}, "ReqCPUS": {"cpus", "nodes"}, "NNodes": {"nodes"}, "NTasks": {"ntasks"},
	"ReqMem": {"mem_mib"}, "Timelimit": {"time_limit"}, "WorkDir": {"work_dir"}, "Reason": {"reason"},
	"WCKey": {"wckey"}, "MaxRSS": {"max_rss_mib"}, "AveRSS": {"ave_rss_mib"}, "MaxRSSNode": {"max_rss_node"},
	"ImagePullTime": {"image_pull_seconds"}, "ImagePullBytes": {"image_pull_bytes"},
}

// sacctFieldsOf lists the record fields cols need, with those sacct
// itself reads: an array task's place (JobID, -j A and A_T), a
// heterogeneous job component's (JobID N+K, -j N) and, for --name, the
// name.
func sacctFieldsOf(cols []sacctCol, byName bool) []string {
	out := []string{"array_job_id", "array_task_id", "het_job_id", "het_job_offset"}
	if byName {
		out = append(out, "name")
	}
	for _, c := range cols {
		for _, n := range sacctNeeds[c.f.name] {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// sacctDefault is sacct's default --format.
const sacctDefault = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"

type sacctCol struct {
	f     *sacctField
	width int
}

func parseSacctFormat(s string) ([]sacctCol, error) {
	var cols []sacctCol
	var names []string
	for i := range sacctFields {
		names = append(names, sacctFields[i].name)
	}
	for _, item := range splitList(s) {
		name, w, hasW := strings.Cut(item, "%")
		i := slices.IndexFunc(sacctFields, func(f sacctField) bool { return strings.EqualFold(f.name, name) })
		if i < 0 {
			hint := ""
			if m := getopt.SuggestFrom(name, names); m != "" {
				hint = "did you mean " + m + "? "
			}
			return nil, invalid("--format: unknown field %q; %sgpud has: %s", name, hint, strings.Join(names, ","))
		}
		col := sacctCol{f: &sacctFields[i], width: sacctFields[i].width}
		if hasW {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 {
				return nil, invalid("--format: bad width in %q; write Field%%N", item)
			}
			col.width = n
		}
		cols = append(cols, col)
	}
	return cols, nil
}

// pastTime reads a window's edge (sacct -S/-E, sreport start=/end=):
// slurmtime's grammar, pointing back from c.Now as Slurm's does.
func (c *Cmd) pastTime(what, v string) (time.Time, error) {
	t, err := slurmtime.Parse(v, c.Now, slurmtime.Past)
	if err != nil {
		return t, invalid("%s: %v", what, err)
	}
	return t, nil
}

func (c *Cmd) sacct(ctx context.Context) error {
	ps, rest, err := c.parse(sacctSet)
	if done, err := c.handled(err, "[-j JOBS] [-o FIELDS] [-P|-p] [-n] [-X] [-S TIME] [-E TIME] [-u USERS|-a] [-s STATES] [--json]"); done || err != nil {
		return err
	}
	if len(rest) > 0 {
		return invalid("unrecognized argument %q; give job ids with -j", rest[0])
	}
	var f api.AcctFilter
	sels, err := parseSels(getopt.All(ps, "jobs"))
	if err != nil {
		return err
	}
	arrays := false
	for _, s := range sels {
		f.IDs = append(f.IDs, s.ref.ID)
		arrays = arrays || s.ref.IsTask
	}
	if f.States, _, err = parseStates(getopt.All(ps, "state")); err != nil {
		return err
	}
	f.Users = splitList(getopt.All(ps, "user")...)
	if len(f.Users) == 0 && !getopt.Has(ps, "allusers") && len(sels) == 0 && c.User != "" && c.User != "root" {
		f.Users = []string{c.User}
	}
	f.Accounts = splitList(getopt.All(ps, "accounts")...)
	f.Partitions = splitList(getopt.All(ps, "partition")...)
	if v, ok := getopt.Last(ps, "starttime"); ok {
		if f.Start, err = c.pastTime("-S/--starttime", v); err != nil {
			return err
		}
	} else if len(sels) == 0 {
		// sacct's default window starts at midnight today.
		y, m, d := c.Now.Date()
		f.Start = time.Date(y, m, d, 0, 0, 0, 0, c.Now.Location())
	}
	if v, ok := getopt.Last(ps, "endtime"); ok {
		if f.End, err = c.pastTime("-E/--endtime", v); err != nil {
			return err
		}
	}
	fmtStr := sacctDefault
	if getopt.Has(ps, "long") {
		fmtStr = "JobID,JobIDRaw,JobName,Partition,QOS,Account,UID,User,Submit,Eligible,Start,End,Elapsed,ElapsedRaw,AllocCPUS,ReqCPUS,ReqMem,NNodes,NodeList,State,ExitCode,AllocTRES,ReqTRES"
	}
	if getopt.Has(ps, "brief") {
		fmtStr = "JobID,State,ExitCode"
	}
	if v, ok := getopt.Last(ps, "format"); ok {
		fmtStr = v
	}
	cols, err := parseSacctFormat(fmtStr)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	// Step rows (N.batch, N.0, ...) unless -X asks for allocations only.
	f.Steps = !getopt.Has(ps, "allocations")
	if !getopt.Has(ps, "json") {
		// The columns' fields only: over 100,000 jobs the rest would
		// cost the controller and this command seconds.
		f.Fields = sacctFieldsOf(cols, len(getopt.All(ps, "name")) > 0)
	}
	jobs, err := cl.AcctJobs(ctx, f)
	if err != nil {
		return fmt.Errorf("read accounting: %w", err)
	}
	for _, j := range jobs {
		arrays = arrays || j.ArrayJobID != 0 && slices.ContainsFunc(sels, func(s jobSel) bool { return s.ref.ID == j.ArrayJobID })
		// A heterogeneous job's leader names every component, as in
		// Slurm's sacct -j N.
		arrays = arrays || j.HetJobID != 0 && j.HetJobID == j.ID && slices.ContainsFunc(sels, func(s jobSel) bool { return s.leader(j.ID) })
	}
	if arrays {
		// An array's id or an A_T names tasks whose job ids differ (and
		// a heterogeneous job's id its components): read without the id
		// filter and select the tasks here.
		all := f
		all.IDs = nil
		if jobs, err = cl.AcctJobs(ctx, all); err != nil {
			return fmt.Errorf("read accounting: %w", err)
		}
		jobs = slices.DeleteFunc(jobs, func(j api.AcctJob) bool {
			return !slices.ContainsFunc(sels, func(s jobSel) bool {
				switch {
				case s.het:
					return j.ID == s.ref.ID && j.HetJobID == s.hetOf
				case s.ref.IsTask:
					return j.ArrayJobID == s.ref.ID && j.ArrayTaskID == s.ref.Task
				}
				return j.ID == s.ref.ID || j.ArrayJobID == s.ref.ID || j.HetJobID == s.ref.ID
			})
		})
	}
	// Accounting holds ended jobs; sacct also lists pending and running
	// ones, so they come from the controller's queue.
	if jobs, err = c.withLive(ctx, cl, jobs, f, sels); err != nil {
		return err
	}
	if names := splitList(getopt.All(ps, "name")...); len(names) > 0 {
		jobs = slices.DeleteFunc(jobs, func(j api.AcctJob) bool { return !slices.Contains(names, j.Name) })
	}
	if getopt.Has(ps, "json") {
		return format.WriteJSON(c.Stdout, map[string]any{"jobs": jobs})
	}
	w := bufio.NewWriterSize(c.Stdout, 64<<10)
	delim := "|"
	if v, ok := getopt.Last(ps, "delimiter"); ok {
		delim = v
	}
	names, widths := make([]string, len(cols)), make([]int, len(cols))
	for i, col := range cols {
		names[i], widths[i] = col.f.name, col.width
	}
	t := newSacctTable(w, ps, delim, names, widths)
	vals := make([]string, len(cols))
	if getopt.Has(ps, "allocations") {
		for i := range jobs {
			jobs[i].Steps = nil // -X: jobs only (running jobs carry theirs)
		}
	}
	rows := sacctRows(jobs, sels) // sacct_steps.go
	for i := range rows {
		for k, col := range cols {
			vals[k] = col.f.value(&rows[i])
		}
		t.row(vals)
	}
	return w.Flush()
}

// withLive adds the controller's pending and running jobs that f and
// sels select to the accounting records (a live job replaces a record of
// the same id: the record is of an earlier, requeued attempt).
func (c *Cmd) withLive(ctx context.Context, cl *api.Client, jobs []api.AcctJob, f api.AcctFilter, sels []jobSel) ([]api.AcctJob, error) {
	lf := api.JobFilter{Users: f.Users, Accounts: f.Accounts, Partitions: f.Partitions}
	byIDs := len(sels) > 0 && !slices.ContainsFunc(sels, func(s jobSel) bool { return s.ref.IsTask })
	if byIDs {
		// -j with job ids: ask for those only, not the whole queue.
		for _, s := range sels {
			lf.IDs = append(lf.IDs, s.ref.ID)
		}
	}
	live, err := cl.Jobs(ctx, lf)
	if err == nil && byIDs && slices.ContainsFunc(live, func(j spec.Job) bool { return j.ArrayJobID != 0 && j.ArrayJobID == j.ID }) {
		// An array's id names all its tasks, whose ids differ.
		lf.IDs = nil
		live, err = cl.Jobs(ctx, lf)
	}
	if err == nil && byIDs {
		// A heterogeneous job's leader names its components too: their
		// ids follow the leader's.
		more := false
		for _, j := range live {
			if j.HetJobID == j.ID && j.HetSize > 1 && slices.ContainsFunc(sels, func(s jobSel) bool { return s.leader(j.ID) }) {
				for k := 1; k < j.HetSize; k++ {
					lf.IDs, more = append(lf.IDs, j.ID+spec.JobID(k)), true
				}
			}
		}
		if more {
			live, err = cl.Jobs(ctx, lf)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	byID := map[spec.JobID]int{}
	for i, j := range jobs {
		byID[j.ID] = i
	}
	for i := range live {
		j := &live[i]
		if j.State.Terminal() {
			continue
		}
		if len(sels) > 0 && !slices.ContainsFunc(sels, func(s jobSel) bool { return s.matches(j) || s.leader(j.HetJobID) }) {
			continue
		}
		if len(f.States) > 0 && !slices.Contains(f.States, j.State) {
			continue
		}
		a := liveAcct(j, c.Now)
		if k, ok := byID[j.ID]; ok {
			jobs[k] = a
			continue
		}
		jobs = append(jobs, a)
	}
	slices.SortStableFunc(jobs, func(a, b api.AcctJob) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

// liveAcct is a queued job as an accounting record.
func liveAcct(j *spec.Job, now time.Time) api.AcctJob {
	r := j.Resources
	nodes := max(len(j.Nodes), r.Nodes, 1)
	a := api.AcctJob{AcctRecord: api.AcctRecord{ID: j.ID, Name: j.Name, User: j.User, UID: j.UID, Account: j.Account, Partition: j.Partition,
		QOS: j.QOS, State: j.State, Reason: j.Reason, SubmitTime: j.SubmitTime, EligibleTime: j.SubmitTime,
		StartTime: j.StartTime, TimeLimit: j.TimeLimit, Nodes: j.Nodes, GPUs: j.GPUs, GPUModel: r.GPUModel,
		GPUProfile: r.GPUProfile, GPUFraction: r.GPUFraction, GPUCount: r.GPUsPerNode * nodes,
		CPUs: r.CPUsPerNode * nodes, MemMiB: r.MemMiB * int64(nodes), Attempts: j.Attempt, WorkDir: j.WorkDir,
		Elapsed: int64(format.Used(j, now) / time.Second), ArrayJobID: j.ArrayJobID, ArrayTaskID: j.ArrayTaskID,
		HetJobID: j.HetJobID, HetOffset: j.HetOffset,
		WCKey: j.WCKey, NTasks: j.Tasks.NTasks}}
	if j.BeginTime.After(j.SubmitTime.Time) {
		a.EligibleTime = j.BeginTime
	}
	if al := j.Alloc; al != nil && len(al.Nodes) > 0 {
		// A running job's allocation is what it holds (--mem=0: the
		// node's whole memory; --exclusive: all of it).
		a.CPUs, a.MemMiB, a.GPUCount = 0, 0, 0
		for _, n := range al.Nodes {
			a.CPUs += n.CPUs
			a.MemMiB += n.MemMiB
			a.GPUCount += len(n.GPUs) + len(n.MIG)
		}
	}
	if a.NTasks == 0 && j.Tasks.NTasksPerNode > 0 {
		a.NTasks = j.Tasks.NTasksPerNode * nodes
	}
	a.Steps = format.LiveSteps(j, now)
	return a
}

// sacctTable writes the table that sacct and sacctmgr print alike, so
// their --parsable, --parsable2 and --noheader cannot drift apart: with
// --parsable2 the fields joined by delim, with --parsable a trailing delim
// as well; otherwise each field right-justified in its column's width
// (sacctPad) under a header and a dashed rule, unless --noheader.
type sacctTable struct {
	w                  *bufio.Writer
	delim              string
	widths             []int
	parsable, trailing bool
}

// newSacctTable writes the header of columns names (unless --noheader)
// and returns the table to write rows to.
func newSacctTable(w *bufio.Writer, ps []getopt.Parsed, delim string, names []string, widths []int) *sacctTable {
	t := &sacctTable{
		w:        w,
		delim:    delim,
		widths:   widths,
		parsable: getopt.Has(ps, "parsable2") || getopt.Has(ps, "parsable"),
		trailing: getopt.Has(ps, "parsable") && !getopt.Has(ps, "parsable2"),
	}
	if !getopt.Has(ps, "noheader") {
		dashes := make([]string, len(widths))
		for i, n := range widths {
			dashes[i] = strings.Repeat("-", n)
		}
		t.row(names)
		if !t.parsable {
			w.WriteString(strings.Join(dashes, " ") + "\n")
		}
	}
	return t
}

// row writes one row of values, one per column.
func (t *sacctTable) row(vals []string) {
	w := t.w
	if t.parsable {
		w.WriteString(strings.Join(vals, t.delim))
		if t.trailing {
			w.WriteString(t.delim)
		}
		w.WriteByte('\n')
		return
	}
	for i, v := range vals {
		if i > 0 {
			w.WriteByte(' ')
		}
		w.WriteString(sacctPad(v, t.widths[i]))
	}
	w.WriteByte('\n')
}

// sacctPad right-justifies v in width, cutting a longer value to width-1
// characters and a '+', as sacct does.
func sacctPad(v string, width int) string {
	if len(v) > width {
		return v[:width-1] + "+"
	}
	return strings.Repeat(" ", width-len(v)) + v
}
