package format

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// stateCodes are squeue's compact state codes.
var stateCodes = map[spec.JobState]string{
	spec.StatePending:     "PD",
	spec.StateRunning:     "R",
	spec.StateSuspended:   "S",
	spec.StateCompleting:  "CG",
	spec.StateCompleted:   "CD",
	spec.StateFailed:      "F",
	spec.StateCancelled:   "CA",
	spec.StateTimeout:     "TO",
	spec.StatePreempted:   "PR",
	spec.StateNodeFail:    "NF",
	spec.StateOutOfMemory: "OOM",
	spec.StateRequeued:    "RQ",
}

// StateCode returns squeue's short code for s ("PD", "R", ...).
func StateCode(s spec.JobState) string {
	if c, ok := stateCodes[s]; ok {
		return c
	}
	return string(s)
}

// ParseState accepts a long name (running) or a short code (R), in any case.
func ParseState(s string) (spec.JobState, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for st, code := range stateCodes {
		if u == string(st) || u == code {
			return st, nil
		}
	}
	names := make([]string, 0, len(spec.AllJobStates))
	for _, st := range spec.AllJobStates {
		names = append(names, StateCode(st)+"/"+string(st))
	}
	return "", fmt.Errorf("unknown job state %q; use one of %s, or all", s, strings.Join(names, ", "))
}

// DefaultJobFormat is gpuq's default listing, squeue's default columns.
const DefaultJobFormat = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"

// JobFields documents the --format field letters gpuq supports.
var JobFields = []struct {
	Letter byte
	Header string
	Help   string
}{
	{'i', "JOBID", "job id (ARRAYID_TASK for an array task, as gpuq cancel and show take it)"},
	{'A', "JOBID", "job id, unique even for array tasks"},
	{'F', "ARRAY_JOB_ID", "array id (the job id outside arrays)"},
	{'K', "ARRAY_TASK_ID", "array task index (N/A outside arrays)"},
	{'P', "PARTITION", "partition"},
	{'j', "NAME", "job name"},
	{'u', "USER", "user name"},
	{'a', "ACCOUNT", "account"},
	{'q', "QOS", "quality of service"},
	{'t', "ST", "state, short code (PD R CG CD F CA TO PR NF OOM RQ S)"},
	{'T', "STATE", "state, long name"},
	{'M', "TIME", "time used, [D-]H:MM:SS"},
	{'l', "TIME_LIMIT", "time limit, or UNLIMITED"},
	{'D', "NODES", "number of nodes"},
	{'R', "NODELIST(REASON)", "nodes if running, (reason) if pending"},
	{'N', "NODELIST", "allocated nodes"},
	{'b', "TRES_PER_NODE", "GPUs asked per node (gpu:h100:2, gpu:1g.10gb:1, gpu:0.5)"},
	{'Q', "PRIORITY", "priority"},
	{'S', "START_TIME", "start time, or the expected start of a pending job"},
	{'V', "SUBMIT_TIME", "submit time"},
	{'Y', "SCHEDNODES", "nodes the scheduler plans a pending job on: (null), as gpud plans no nodes ahead (Slurm's too, without backfill)"},
	{'r', "REASON", "pending reason, or why the job ended; a pending job the scheduler could not place adds its node counts per reason: Resources (10 nodes: 6 insufficient free h100 GPUs, 3 constraint ib, 1 drain)"},
	{'G', "IDLE_GPU", "IdleGPU when the job's GPUs sat below its idle-GPU policy's utilisation for its time, else empty"},
}

// JobFormat is a parsed --format specification.
type JobFormat struct{ fields []Field }

// ParseJobFormat parses an squeue-style format: %[.][size]letter fields
// and literal text; %% is a percent sign.
func ParseJobFormat(s string) (JobFormat, error) {
	fields, ferr := ParseFields(s, knownField)
	if ferr != nil {
		return JobFormat{}, fmt.Errorf("bad format %q: field %d needs a letter from %s after %%[.][size]", s, ferr.Index, fieldLetters())
	}
	return JobFormat{fields: fields}, nil
}

func knownField(c byte) bool {
	return slices.ContainsFunc(JobFields, func(f struct {
		Letter byte
		Header string
		Help   string
	}) bool {
		return f.Letter == c
	})
}

func fieldLetters() string {
	var b strings.Builder
	for _, f := range JobFields {
		b.WriteByte('%')
		b.WriteByte(f.Letter)
		b.WriteByte(' ')
	}
	return strings.TrimSpace(b.String())
}

func header(c byte) string {
	for _, f := range JobFields {
		if f.Letter == c {
			return f.Header
		}
	}
	return ""
}

// WriteJobs writes one line per job (and a header unless noHeader). now
// is the clock reading for elapsed times. It buffers its output and reuses
// one line buffer, so 100,000 jobs cost no per-row allocations that matter.
func WriteJobs(w io.Writer, jobs []spec.Job, f JobFormat, now time.Time, noHeader bool) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	line := make([]byte, 0, 256)
	if !noHeader {
		for _, fl := range f.fields {
			line = append(line, fl.Lit...)
			if fl.Verb != 0 {
				line = pad(line, []byte(header(fl.Verb)), fl)
			}
		}
		line = append(trimRight(line), '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	var val []byte
	for i := range jobs {
		j := &jobs[i]
		line = line[:0]
		for _, fl := range f.fields {
			line = append(line, fl.Lit...)
			if fl.Verb == 0 {
				continue
			}
			val = appendJobField(val[:0], j, fl.Verb, now)
			line = pad(line, val, fl)
		}
		line = append(trimRight(line), '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// pad appends v to b in fl's width: truncated when longer (like squeue),
// right-justified with ".".
func pad(b []byte, v []byte, fl Field) []byte {
	if fl.Width == 0 {
		return append(b, v...)
	}
	if len(v) > fl.Width {
		v = v[:fl.Width]
	}
	spaces := fl.Width - len(v)
	if fl.Right {
		for range spaces {
			b = append(b, ' ')
		}
		return append(b, v...)
	}
	b = append(b, v...)
	for range spaces {
		b = append(b, ' ')
	}
	return b
}

func trimRight(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

func orNA(b []byte, s string) []byte {
	if s == "" {
		return append(b, "N/A"...)
	}
	return append(b, s...)
}

func appendJobField(b []byte, j *spec.Job, verb byte, now time.Time) []byte {
	switch verb {
	case 'i':
		if j.HetJobID != 0 { // a heterogeneous job's component: 7+1
			b = strconv.AppendUint(b, uint64(j.HetJobID), 10)
			b = append(b, '+')
			return strconv.AppendInt(b, int64(j.HetOffset), 10)
		}
		if j.ArrayJobID != 0 {
			b = strconv.AppendUint(b, uint64(j.ArrayJobID), 10)
			b = append(b, '_')
			return strconv.AppendInt(b, int64(j.ArrayTaskID), 10)
		}
		return strconv.AppendUint(b, uint64(j.ID), 10)
	case 'A':
		return strconv.AppendUint(b, uint64(j.ID), 10)
	case 'F':
		if j.ArrayJobID != 0 {
			return strconv.AppendUint(b, uint64(j.ArrayJobID), 10)
		}
		return strconv.AppendUint(b, uint64(j.ID), 10)
	case 'K':
		if j.ArrayJobID == 0 {
			return append(b, "N/A"...)
		}
		return strconv.AppendInt(b, int64(j.ArrayTaskID), 10)
	case 'P':
		return orNA(b, JobPartition(j))
	case 'j':
		return append(b, j.Name...)
	case 'u':
		return append(b, j.User...)
	case 'a':
		return orNA(b, j.Account)
	case 'q':
		return orNA(b, j.QOS)
	case 't':
		return append(b, StateCode(j.State)...)
	case 'T':
		return append(b, j.State...)
	case 'M':
		return AppendElapsed(b, Used(j, now))
	case 'l':
		if j.TimeLimit == 0 {
			return append(b, "UNLIMITED"...)
		}
		return AppendElapsed(b, j.TimeLimit.Std())
	case 'D':
		n := len(j.Nodes)
		if n == 0 {
			n = j.Resources.Nodes
		}
		return strconv.AppendInt(b, int64(n), 10)
	case 'R':
		if j.State == spec.StatePending || len(j.Nodes) == 0 {
			r := j.Reason
			if r == "" {
				r = spec.ReasonNone
			}
			b = append(b, '(')
			b = append(b, r...)
			return append(b, ')')
		}
		return append(b, hostlist.Compress(j.Nodes)...)
	case 'N':
		return append(b, hostlist.Compress(j.Nodes)...)
	case 'b':
		return orNA(b, GPURequest(j.Resources))
	case 'Q':
		return strconv.AppendInt(b, j.Priority, 10)
	case 'S':
		t := j.StartTime
		if t.IsZero() {
			t = j.ExpectedStart
		}
		return appendTime(b, t)
	case 'V':
		return appendTime(b, j.SubmitTime)
	case 'Y':
		return append(b, "(null)"...)
	case 'r':
		b = orNA(b, j.Reason)
		if j.State == spec.StatePending && j.NodeReasons != "" {
			// Slurm's reason first, as scripts read it; then why no node
			// runs the job (%R keeps Slurm's bare "(Resources)").
			b = append(b, " ("...)
			b = append(b, j.NodeReasons...)
			b = append(b, ')')
		}
		if p := ImagePull(j); p != "" {
			// A pull under way: the job's own before it starts, or
			// the node's prefetch while it waits.
			b = append(b, " ("...)
			b = append(b, p...)
			b = append(b, ')')
		}
		return b
	case 'G':
		if j.IdleGPU != "" {
			return append(b, "IdleGPU"...)
		}
		return b
	}
	return b
}

// TimeLayout is how gpuq prints instants, local time like Slurm.
const TimeLayout = "2006-01-02T15:04:05"

func appendTime(b []byte, t spec.Time) []byte {
	if t.IsZero() {
		return append(b, "N/A"...)
	}
	return t.Local().AppendFormat(b, TimeLayout)
}

// Used is how long j has run in its current attempt: 0 before it starts,
// up to now while it runs, up to its end afterwards.
func Used(j *spec.Job, now time.Time) time.Duration {
	if j.StartTime.IsZero() || j.State == spec.StatePending {
		return 0
	}
	end := now
	if j.State == spec.StateSuspended && !j.SuspendTime.IsZero() {
		end = j.SuspendTime.Time // the clock stops while suspended
	}
	if !j.EndTime.IsZero() && j.EndTime.After(j.StartTime.Time) {
		end = j.EndTime.Time
	}
	// Time spent suspended is not run time (Slurm's RunTime).
	return max(end.Sub(j.StartTime.Time)-j.Suspended.Std(), 0)
}

// AppendElapsed writes d like squeue and sinfo: M:SS, H:MM:SS or
// D-HH:MM:SS.
func AppendElapsed(b []byte, d time.Duration) []byte {
	return appendClock(b, int64(d/time.Second), false)
}

// appendClock writes s seconds as Slurm's two duration forms do: D-HH:MM:SS
// from a day on; below it HH:MM:SS with every field two digits wide when
// padded (sacct, scontrol), else without leading zero fields (squeue's
// M:SS and H:MM:SS).
func appendClock(b []byte, s int64, padded bool) []byte {
	days, h, m, sec := s/86400, s/3600%24, s/60%60, s%60
	two := func(b []byte, n int64) []byte {
		if n < 10 {
			b = append(b, '0')
		}
		return strconv.AppendInt(b, n, 10)
	}
	switch {
	case days > 0:
		b = strconv.AppendInt(b, days, 10)
		b = append(b, '-')
		b = two(b, h)
	case padded:
		b = two(b, h)
	case h > 0:
		b = strconv.AppendInt(b, h, 10)
	default:
		b = strconv.AppendInt(b, m, 10)
		b = append(b, ':')
		return two(b, sec)
	}
	b = append(b, ':')
	b = two(b, m)
	b = append(b, ':')
	return two(b, sec)
}

// GPURequest renders a job's per-node GPU ask as Slurm TRES: gpu:h100:2,
// gpu:1g.10gb:1, gpu:0.5; "" when it asks for none.
func GPURequest(r spec.Resources) string {
	kind := r.GPUModel
	if r.GPUProfile != "" {
		kind = r.GPUProfile
	}
	var count string
	switch {
	case r.GPUFraction > 0:
		count = strconv.FormatFloat(r.GPUFraction, 'g', -1, 64)
	case r.GPUsPerNode > 0:
		count = strconv.Itoa(r.GPUsPerNode)
	case r.TotalGPUs > 0:
		count = strconv.Itoa(r.TotalGPUs) + "(total)"
	default:
		return ""
	}
	if kind == "" {
		return "gpu:" + count
	}
	return "gpu:" + kind + ":" + count
}

// WriteJSON writes v as indented JSON (gpuq show --json, gpuq nodes --json).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteJobsJSON streams jobs as a JSON array, one job per line, so a large
// listing is never held twice in memory.
func WriteJobsJSON(w io.Writer, jobs []spec.Job) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("[")
	for i := range jobs {
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n")
		b, err := json.Marshal(&jobs[i])
		if err != nil {
			return fmt.Errorf("encode job %d: %w", jobs[i].ID, err)
		}
		bw.Write(b)
	}
	bw.WriteString("\n]\n")
	return bw.Flush()
}

// JobField is one squeue field of j as text (letters of JobFields), for
// sorting and filtering by the Slurm-named commands.
func JobField(j *spec.Job, verb byte, now time.Time) string {
	return string(appendJobField(nil, j, verb, now))
}

// KnownJobField reports whether c is a field letter of JobFields.
func KnownJobField(c byte) bool { return knownField(c) }

// JobPartition is the partition squeue and scontrol show for j: a pending
// job submitted to several (sbatch -p a,b) shows them all, as in Slurm,
// until it starts in one.
func JobPartition(j *spec.Job) string {
	if j.State == spec.StatePending && len(j.Partitions) > 1 {
		return strings.Join(j.Partitions, ",")
	}
	return j.Partition
}
