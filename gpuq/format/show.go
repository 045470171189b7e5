package format

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// WriteJobShow writes j like scontrol show job: key=value pairs, grouped
// on indented lines, "(null)" for unset values so scripts can split on
// spaces.
func WriteJobShow(w io.Writer, j *spec.Job, now time.Time) error {
	bw := bufio.NewWriter(w)
	null := func(s string) string {
		if s == "" {
			return "(null)"
		}
		return s
	}
	tm := func(t spec.Time) string {
		if t.IsZero() {
			return "Unknown"
		}
		return t.Local().Format(TimeLayout)
	}
	limit := "UNLIMITED"
	if j.TimeLimit != 0 {
		limit = string(AppendElapsed(nil, j.TimeLimit.Std()))
	}
	reason := j.Reason
	if reason == "" {
		reason = spec.ReasonNone
	}
	r := j.Resources
	lines := [][]string{
		{"JobId=" + strconv.FormatUint(uint64(j.ID), 10), "JobName=" + null(j.Name)},
		{fmt.Sprintf("UserId=%s(%d)", null(j.User), j.UID), "GroupId=" + strconv.FormatUint(uint64(j.GID), 10), "Account=" + null(j.Account), "QOS=" + null(j.QOS)},
		{"JobState=" + string(j.State), "Reason=" + reason, "Priority=" + strconv.FormatInt(j.Priority, 10), "Nice=" + strconv.Itoa(j.Nice), "ExitCode=" + ExitCode(j.ExitCode, j.Signal)},
		{"RunTime=" + string(AppendElapsed(nil, Used(j, now))), "TimeLimit=" + limit, "Requeue=" + boolNum(j.Requeue), "Restarts=" + strconv.Itoa(max(j.Attempt-1-j.HWRequeues, 0)), "Hold=" + boolNum(j.Hold)},
		checkpointLine(j, now, tm),
		{"SubmitTime=" + tm(j.SubmitTime), "BeginTime=" + tm(j.BeginTime), "StartTime=" + tm(j.StartTime), "EndTime=" + tm(j.EndTime)},
		{"ExpectedStart=" + tm(j.ExpectedStart), "Dependency=" + null(j.Depend), "Array=" + null(j.Array)},
		{"Partition=" + null(j.Partition), "NodeList=" + null(hostlist.Compress(j.Nodes)), "ReqNodeList=" + null(strings.Join(r.NodeList, ",")), "ExcNodeList=" + null(strings.Join(r.Exclude, ","))},
		{"NumNodes=" + strconv.Itoa(r.Nodes), "CPUsPerNode=" + strconv.Itoa(r.CPUsPerNode), "MemPerNode=" + MiB(r.MemMiB), "TresPerNode=" + null(GPURequest(r)), "Exclusive=" + boolNum(r.Exclusive), "Features=" + null(r.Constraint)},
		{"GPUs=" + null(strings.Join(j.GPUs, ",")), "IdleGPU=" + null(j.IdleGPU)},
		{"WorkDir=" + null(j.WorkDir), "SubmitDir=" + null(j.SubmitDir)},
		{"StdOut=" + null(firstNonEmpty(j.StdoutPath, j.Output)), "StdErr=" + null(firstNonEmpty(j.StderrPath, j.Error, j.StdoutPath, j.Output))},
		append([]string{"Image=" + null(j.Image), "Signal=" + null(j.JobSpec.Signal), "CheckpointInterval=" + ckpt(j.Ckpt), "Comment=" + null(j.Comment)},
			ImageFields(j)...),
	}
	if j.ArrayJobID != 0 {
		// An array task names its array, as scontrol does.
		lines[0] = append(lines[0][:1:1], "ArrayJobId="+strconv.FormatUint(uint64(j.ArrayJobID), 10),
			"ArrayTaskId="+strconv.Itoa(j.ArrayTaskID), lines[0][1])
	}
	if j.NodeReasons != "" {
		// Why no node runs the pending job now; the last line, as its
		// value has spaces.
		lines = append(lines, []string{"NodeReasons=" + j.NodeReasons})
	}
	for i, l := range lines {
		if i > 0 {
			bw.WriteString("   ")
		}
		bw.WriteString(strings.Join(l, " "))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// checkpointLine shows the attempt count and the newest sealed checkpoint:
// SinceCheckpoint is the work a failure of the running attempt would lose
// now, LostWork what the latest requeue lost.
func checkpointLine(j *spec.Job, now time.Time, tm func(spec.Time) string) []string {
	last, since := "(null)", "(null)"
	if lc := j.LastCheckpoint; lc.Seq > 0 {
		last = fmt.Sprintf("%d@%s(attempt=%d,%s)", lc.Seq, tm(lc.Time), lc.Attempt, bytesSize(lc.Bytes))
		if j.State.Active() && lc.Attempt == j.Attempt && now.After(lc.Time.Time) {
			since = string(AppendElapsed(nil, now.Sub(lc.Time.Time)))
		}
	}
	lost := "(null)"
	if j.LostWork > 0 {
		lost = string(AppendElapsed(nil, j.LostWork.Std()))
	}
	return []string{"Attempt=" + strconv.Itoa(j.Attempt), "Checkpoints=" + strconv.Itoa(j.Checkpoints),
		"LastCheckpoint=" + last, "SinceCheckpoint=" + since, "LostWork=" + lost}
}

// bytesSize writes a byte count compactly: 512B, 4.0K, 1.5M.
func bytesSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + "B"
	}
	f, unit := float64(n), "KMGTPE"
	for i := 0; ; i++ {
		f /= 1024
		if f < 1024 || i == len(unit)-1 {
			return strconv.FormatFloat(f, 'f', 1, 64) + unit[i:i+1]
		}
	}
}

func ckpt(d spec.Duration) string {
	if d == 0 {
		return "(null)"
	}
	return d.Std().String()
}

func boolNum(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// MiB writes a memory size compactly: 512M, 4G, 1.5G, 2T.
func MiB(mib int64) string {
	switch {
	case mib >= 1<<20 && mib%(1<<20) == 0:
		return strconv.FormatInt(mib>>20, 10) + "T"
	case mib >= 1024 && mib%1024 == 0:
		return strconv.FormatInt(mib>>10, 10) + "G"
	case mib >= 1024:
		return strconv.FormatFloat(float64(mib)/1024, 'f', 1, 64) + "G"
	}
	return strconv.FormatInt(mib, 10) + "M"
}
