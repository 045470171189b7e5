package format

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// AcctField is one gpuq acct --format field.
type AcctField struct {
	Name   string // what --format takes, matched ignoring case and "_"
	Header string
	Help   string
	value  func(j *api.AcctJob) string
}

// AcctFields lists the gpuq acct --format fields, sacct's names where
// sacct has one.
var AcctFields = []AcctField{
	{"jobid", "JobID", "job id; N.batch, N.0, ... for its steps", func(j *api.AcctJob) string { return AcctJobID(strconv.FormatUint(uint64(j.ID), 10), j) }},
	{"jobname", "JobName", "job name", func(j *api.AcctJob) string { return j.Name }},
	{"user", "User", "user name", func(j *api.AcctJob) string { return j.User }},
	{"account", "Account", "account", func(j *api.AcctJob) string { return j.Account }},
	{"partition", "Partition", "partition", func(j *api.AcctJob) string { return j.Partition }},
	{"qos", "QOS", "quality of service", func(j *api.AcctJob) string { return j.QOS }},
	{"state", "State", "job state", func(j *api.AcctJob) string { return string(j.State) }},
	{"exitcode", "ExitCode", "exit code and the signal that ended the job, code:signal (0:125 for OUT_OF_MEMORY, as Slurm)", func(j *api.AcctJob) string {
		return StateExitCode(j.State, j.ExitCode, j.Signal)
	}},
	{"submit", "Submit", "submit time", func(j *api.AcctJob) string { return AcctTime(j.SubmitTime) }},
	{"start", "Start", "start time of the last attempt", func(j *api.AcctJob) string { return AcctTime(j.StartTime) }},
	{"end", "End", "end time", func(j *api.AcctJob) string { return AcctTime(j.EndTime) }},
	{"elapsed", "Elapsed", "run time of the last attempt, [D-]HH:MM:SS", func(j *api.AcctJob) string { return AcctDuration(j.Elapsed) }},
	{"timelimit", "Timelimit", "time limit, or UNLIMITED", func(j *api.AcctJob) string {
		if j.TimeLimit == 0 {
			return "UNLIMITED"
		}
		return AcctDuration(int64(j.TimeLimit.Std().Seconds()))
	}},
	{"nodelist", "NodeList", "nodes of the last attempt", func(j *api.AcctJob) string {
		if len(j.Nodes) == 0 {
			return "None assigned"
		}
		return hostlist.Compress(j.Nodes)
	}},
	{"ngpus", "GPUs", "number of GPUs (or MIG slices) allocated", func(j *api.AcctJob) string { return strconv.Itoa(j.GPUCount) }},
	{"gpus", "GPUList", "allocated device UUIDs (MIG UUIDs for slices)", func(j *api.AcctJob) string { return strings.Join(j.GPUs, ",") }},
	{"gpumodel", "GPUModel", "GPU model, with the MIG profile or fraction when the job used part of a GPU", func(j *api.AcctJob) string {
		switch {
		case j.GPUProfile != "":
			return j.GPUModel + ":" + j.GPUProfile
		case j.GPUFraction > 0 && j.GPUFraction < 1:
			return j.GPUModel + ":" + strconv.FormatFloat(j.GPUFraction, 'g', -1, 64)
		}
		return j.GPUModel
	}},
	{"gpu_hours", "GPUHours", "GPU-hours over every attempt", func(j *api.AcctJob) string { return strconv.FormatFloat(j.GPUHours, 'f', 4, 64) }}, // 4 decimals: a short job still shows its 0.0033
	{"cpu_hours", "CPUHours", "CPU-hours over every attempt", func(j *api.AcctJob) string { return strconv.FormatFloat(j.CPUHours, 'f', 4, 64) }},
	{"slice_hours", "SliceHours", "MIG slice-hours, a slice counting 1 (gpu_hours bills it at its fraction of the GPU)", func(j *api.AcctJob) string {
		return strconv.FormatFloat(j.SliceHours, 'f', 4, 64)
	}},
	{"gpu_util", "GPUUtil%", "mean GPU utilisation from the nodes' usage samples", func(j *api.AcctJob) string { return strconv.FormatFloat(j.GPUUtil, 'f', 1, 64) }},
	{"energy_kwh", "EnergyKWh", "GPU energy from the nodes' usage samples", func(j *api.AcctJob) string { return strconv.FormatFloat(j.EnergyKWh, 'f', 4, 64) }},
	{"co2_kg", "CO2kg", "CO2e of that energy at gpud.toml's grid intensity", func(j *api.AcctJob) string { return strconv.FormatFloat(j.CO2Kg, 'f', 4, 64) }},
	{"cost", "Cost", "GPU-hours at gpud.toml's price per GPU-hour of the model", func(j *api.AcctJob) string { return strconv.FormatFloat(j.Cost, 'f', 2, 64) }},
	{"cpus", "CPUs", "CPUs allocated", func(j *api.AcctJob) string { return strconv.Itoa(j.CPUs) }},
	{"mem", "Mem", "memory allocated", func(j *api.AcctJob) string { return MiB(j.MemMiB) }},
	{"attempts", "Attempts", "attempts (more than 1 after a requeue)", func(j *api.AcctJob) string { return strconv.Itoa(j.Attempts) }},
	{"attempt", "Attempt", "attempt number: the last one, or with -D the row's", func(j *api.AcctJob) string {
		if n := len(j.AttemptHistory); n > 0 {
			return strconv.Itoa(j.AttemptHistory[n-1].Attempt)
		}
		return strconv.Itoa(j.Attempts)
	}},
	{"checkpoint", "Checkpoint", "newest sealed checkpoint, seq@time, or None: the job's, or with -D the attempt's", func(j *api.AcctJob) string {
		for i := len(j.AttemptHistory) - 1; i >= 0; i-- {
			if a := &j.AttemptHistory[i]; a.CheckpointSeq > 0 {
				return strconv.Itoa(a.CheckpointSeq) + "@" + AcctTime(a.CheckpointTime)
			}
		}
		return "None"
	}},
	{"lost_work", "LostWork", "compute requeues threw away (from the checkpoint or start to the requeue): the job's total, or with -D the attempt's", func(j *api.AcctJob) string {
		var s int64
		for _, a := range j.AttemptHistory {
			s += a.LostWork
		}
		return AcctDuration(s)
	}},
	{"reason", "Reason", "why the job ended or waits", func(j *api.AcctJob) string {
		if j.Reason == "" {
			return "None"
		}
		return j.Reason
	}},
}

// AttemptFields are the --format fields read from a job's attempt
// history, which gpuq acct then asks for.
var AttemptFields = []string{"attempt", "checkpoint", "lost_work"}

// NeedsAttempts reports whether f shows one of AttemptFields.
func (f AcctFormat) NeedsAttempts() bool {
	for _, fl := range f.fields {
		if slices.Contains(AttemptFields, fl.Name) {
			return true
		}
	}
	return false
}

// ExpandAttempts turns each job into one row per attempt for gpuq acct
// -D, as sacct --duplicates lists each requeued record: the job's fields
// with the attempt's start, end, elapsed, nodes, CPUs, memory, state and
// reason, and AttemptHistory holding that attempt alone. A job that never
// started stays one row; one waiting again after a requeue gets a last
// PENDING row for the attempt to come. Device UUIDs are known for the
// last attempt only, so earlier rows list none.
func ExpandAttempts(jobs []api.AcctJob) []api.AcctJob {
	out := make([]api.AcctJob, 0, len(jobs))
	for _, j := range jobs {
		hist := j.AttemptHistory
		if len(hist) == 0 {
			out = append(out, j)
			continue
		}
		for i, a := range hist {
			r := j
			r.StartTime, r.EndTime, r.Elapsed = a.StartTime, a.EndTime, a.Elapsed
			r.Nodes, r.CPUs, r.MemMiB = a.Nodes, a.CPUs, a.MemMiB
			r.State, r.Reason = a.State, a.Reason
			r.ImagePullSeconds, r.ImagePullBytes = a.ImagePullSeconds, a.ImagePullBytes
			r.AttemptHistory = hist[i : i+1 : i+1]
			if i < len(hist)-1 {
				r.GPUs = nil
			}
			out = append(out, r)
		}
		if last := hist[len(hist)-1]; j.State == spec.StatePending && last.State == spec.StateRequeued {
			r := j
			r.StartTime, r.EndTime, r.Elapsed = spec.Time{}, spec.Time{}, 0
			r.Nodes, r.GPUs = nil, nil
			r.ImagePullSeconds, r.ImagePullBytes = 0, 0
			r.AttemptHistory = []api.AcctAttempt{{Attempt: last.Attempt + 1, State: spec.StatePending, Reason: j.Reason}}
			out = append(out, r)
		}
	}
	return out
}

// DefaultAcctFormat is gpuq acct's default --format.
const DefaultAcctFormat = "jobid,jobname,user,account,partition,state,exitcode,elapsed,ngpus,gpu_hours"

// AcctFormat is a parsed gpuq acct --format.
type AcctFormat struct{ fields []*AcctField }

func normField(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "")
}

// ParseAcctFormat parses a comma list of field names, in any case.
func ParseAcctFormat(s string) (AcctFormat, error) {
	var f AcctFormat
	for name := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		var found *AcctField
		for i := range AcctFields {
			if normField(AcctFields[i].Name) == normField(name) {
				found = &AcctFields[i]
				break
			}
		}
		if found == nil {
			return AcctFormat{}, fmt.Errorf("unknown field %q; use a comma list of %s", strings.TrimSpace(name), AcctFieldNames())
		}
		f.fields = append(f.fields, found)
	}
	if len(f.fields) == 0 {
		return AcctFormat{}, fmt.Errorf("no fields in %q; use a comma list of %s", s, AcctFieldNames())
	}
	return f, nil
}

// AcctFieldNames lists the --format field names, comma separated.
func AcctFieldNames() string {
	names := make([]string, 0, len(AcctFields))
	for _, f := range AcctFields {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// AcctStyle is how WriteAcct lays out rows.
type AcctStyle int

// Output styles of gpuq acct.
const (
	// AcctTable aligns columns under a header and a dashed rule, like sacct.
	AcctTable AcctStyle = iota
	// AcctParsable separates fields with "|" and ends each line with one
	// (sacct --parsable).
	AcctParsable
	// AcctCSV writes RFC 4180 CSV.
	AcctCSV
)

// WriteAcct writes jobs in f's columns (and a header unless noHeader).
func WriteAcct(w io.Writer, jobs []api.AcctJob, f AcctFormat, style AcctStyle, noHeader bool) error {
	rows := make([][]string, 0, len(jobs)+1)
	if !noHeader {
		h := make([]string, len(f.fields))
		for i, fl := range f.fields {
			h[i] = fl.Header
		}
		rows = append(rows, h)
	}
	for i := range jobs {
		r := make([]string, len(f.fields))
		for k, fl := range f.fields {
			r[k] = fl.value(&jobs[i])
		}
		rows = append(rows, r)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	switch style {
	case AcctCSV:
		cw := csv.NewWriter(bw)
		if err := cw.WriteAll(rows); err != nil {
			return err
		}
	case AcctParsable:
		for _, r := range rows {
			for _, v := range r {
				bw.WriteString(v)
				bw.WriteByte('|')
			}
			bw.WriteByte('\n')
		}
	default:
		writeAligned(bw, rows, noHeader)
	}
	return bw.Flush()
}

// writeAligned pads every column to its widest value, with a dashed rule
// under the header as sacct draws it.
func writeAligned(w *bufio.Writer, rows [][]string, noHeader bool) {
	if len(rows) == 0 {
		return
	}
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, v := range r {
			width[i] = max(width[i], utf8.RuneCountInString(v))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, v := range r {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(v)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(v)))
			}
		}
		w.WriteString(strings.TrimRight(b.String(), " "))
		w.WriteByte('\n')
	}
	for n, r := range rows {
		line(r)
		if n == 0 && !noHeader {
			rule := make([]string, len(width))
			for i, wd := range width {
				rule[i] = strings.Repeat("-", wd)
			}
			line(rule)
		}
	}
}

// WriteAcctJSON writes jobs as an indented JSON array ([] when empty).
func WriteAcctJSON(w io.Writer, jobs []api.AcctJob) error {
	if jobs == nil {
		jobs = []api.AcctJob{}
	}
	return WriteJSON(w, jobs)
}

// AcctDuration writes seconds like sacct and scontrol: HH:MM:SS, or
// D-HH:MM:SS from a day on; a negative count is 00:00:00.
func AcctDuration(s int64) string {
	return string(appendClock(nil, max(s, 0), true))
}

// AcctTime writes an instant like sacct: local time, Unknown when unset.
func AcctTime(t spec.Time) string {
	if t.IsZero() {
		return "Unknown"
	}
	return t.Local().Format(TimeLayout)
}
