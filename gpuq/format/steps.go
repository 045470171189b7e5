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

// StepRef is a step's id as users write it: 42.0, 42.batch (array tasks
// by their own job id, as squeue --steps shows them).
func StepRef(j *spec.Job, s *spec.Step) string {
	return strconv.FormatUint(uint64(j.ID), 10) + "." + s.ID
}

// stepTime is a running step's run time, or an ended one's elapsed.
func stepTime(s *spec.Step, now time.Time) time.Duration {
	if s.StartTime.IsZero() {
		return 0
	}
	end := now
	if !s.EndTime.IsZero() {
		end = s.EndTime.Time
	}
	return max(0, end.Sub(s.StartTime.Time))
}

// WriteStepsShow writes a job's running steps under gpuq show, one line
// each as scontrol show step writes them.
func WriteStepsShow(w io.Writer, j *spec.Job, now time.Time) error {
	bw := bufio.NewWriter(w)
	for i := range j.Steps {
		s := &j.Steps[i]
		if !s.Running() {
			continue
		}
		fmt.Fprintf(bw, "   StepId=%s Name=%s State=%s NodeList=%s Tasks=%d CPUs=%d GPUs=%d RunTime=%s\n",
			StepRef(j, s), s.Name, s.State, hostlist.Compress(s.Nodes), s.NTasks, s.CPUs, s.GPUs,
			AppendElapsed(nil, stepTime(s, now)))
	}
	return bw.Flush()
}

// WriteSteps is squeue --steps: the running steps of jobs, as Slurm's
// default step format (%.15i %.8j %.9P %.8u %.9M %N).
func WriteSteps(w io.Writer, jobs []spec.Job, now time.Time, noHeader bool, only func(j *spec.Job, s *spec.Step) bool) error {
	bw := bufio.NewWriter(w)
	pad := func(v string, n int) string {
		if len(v) > n {
			return v[:n]
		}
		return strings.Repeat(" ", n-len(v)) + v
	}
	if !noHeader {
		fmt.Fprintf(bw, "%s %s %s %s %s %s\n", pad("STEPID", 15), pad("NAME", 8), pad("PARTITION", 9), pad("USER", 8), pad("TIME", 9), "NODELIST")
	}
	for i := range jobs {
		j := &jobs[i]
		for k := range j.Steps {
			s := &j.Steps[k]
			if !s.Running() || only != nil && !only(j, s) {
				continue
			}
			fmt.Fprintf(bw, "%s %s %s %s %s %s\n", pad(StepRef(j, s), 15), pad(s.Name, 8), pad(j.Partition, 9),
				pad(j.User, 8), pad(string(AppendElapsed(nil, stepTime(s, now))), 9), hostlist.Compress(s.Nodes))
		}
	}
	return bw.Flush()
}
