package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/spec"
)

// ReadAccountingJSON reads an accounting export: the JSON array `gpuq
// acct --json --duplicates` prints (GET /v1/accounting/jobs with the
// attempt history), one object per job.
func ReadAccountingJSON(r io.Reader) ([]api.AcctJob, error) {
	var jobs []api.AcctJob
	dec := json.NewDecoder(r)
	if err := dec.Decode(&jobs); err != nil {
		return nil, fmt.Errorf("read accounting export: %w (give the JSON array of gpuq acct --json --duplicates)", err)
	}
	return jobs, nil
}

// AccountingStats counts what FromAccounting did with the records.
type AccountingStats struct {
	Records int
	// Replayed jobs, of which Fixed were running at the window's start
	// (they keep their real allocation until their real end).
	Replayed, Fixed int
	// Outside the window: ended before it or submitted after it.
	Outside int
	// NoRequest jobs are older than accounting's request column: their
	// request is taken from their allocation.
	NoRequest int
	// Unstarted jobs never started in the accounting and were not
	// cancelled while waiting: they run their time limit if the replay
	// starts them.
	Unstarted int
}

// defaultUnstartedRuntime is what a job that never started and has no
// time limit runs if the replay starts it.
const defaultUnstartedRuntime = time.Hour

// FromAccounting turns accounting records into the jobs of a replay of
// [start, end): jobs submitted before end that had not ended by start.
// Zero start or end leaves that side open. The jobs come sorted by
// submit time, then id.
func FromAccounting(recs []api.AcctJob, start, end time.Time) ([]sim.TwinJob, AccountingStats, error) {
	st := AccountingStats{Records: len(recs)}
	var out []sim.TwinJob
	var bad []string
	for i := range recs {
		r := &recs[i]
		submit := r.SubmitTime.Time
		if submit.IsZero() {
			bad = append(bad, fmt.Sprintf("job %d has no submit time", r.ID))
			continue
		}
		ended := r.EndTime.Time
		if !end.IsZero() && !submit.Before(end) || !start.IsZero() && !ended.IsZero() && ended.Before(start) {
			st.Outside++
			continue
		}
		j := sim.TwinJob{ID: r.ID, Name: r.Name, User: r.User, Account: r.Account, QOS: r.QOS, Partition: r.Partition,
			Submit: submit, TimeLimit: r.TimeLimit.Std(), Outcome: r.State, Nice: r.Nice, Depend: r.Dependency,
			ArrayJobID: r.ArrayJobID, ArrayTaskID: r.ArrayTaskID, ArrayMax: r.ArrayMax, RealAttempts: r.Attempts}
		if e := r.EligibleTime.Time; e.After(submit) {
			j.Begin = e
		}
		if r.Request != nil {
			j.Req = *r.Request
		} else {
			st.NoRequest++
			j.Req = requestOf(r)
		}
		normalise(&j.Req)
		// Runs: the attempt history when the export has it, else the
		// record's last attempt.
		first, lastStart, lastEnd := r.StartTime.Time, r.StartTime.Time, ended
		if h := r.AttemptHistory; len(h) > 0 {
			first = h[0].StartTime.Time
			lastStart, lastEnd = h[len(h)-1].StartTime.Time, h[len(h)-1].EndTime.Time
			if lastEnd.IsZero() && !r.State.Active() {
				lastEnd = ended
			}
		}
		j.RealStart = first
		switch {
		case !lastStart.IsZero() && !lastEnd.IsZero():
			j.Runtime = lastEnd.Sub(lastStart)
		case !lastStart.IsZero():
			j.Runtime = time.Duration(r.Elapsed) * time.Second // still running: so far
		case !ended.IsZero():
			j.CancelAt = ended // cancelled (or failed) while waiting
		default:
			st.Unstarted++
			j.Runtime = j.TimeLimit
			if j.Runtime <= 0 {
				j.Runtime = defaultUnstartedRuntime
			}
		}
		if !start.IsZero() && !lastStart.IsZero() && lastStart.Before(start) {
			// Running when the window opens: it keeps its real place.
			j.Fixed = true
			j.RealStart = lastStart
			for _, n := range r.Nodes {
				j.Alloc = append(j.Alloc, spec.NodeAlloc{Node: n})
			}
			spread(&j, r)
			st.Fixed++
		}
		out = append(out, j)
	}
	if len(bad) > 0 {
		return nil, st, fmt.Errorf("accounting records unusable for a replay: %s", joinMax(bad, 10))
	}
	slices.SortStableFunc(out, func(a, b sim.TwinJob) int {
		if c := a.Submit.Compare(b.Submit); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	st.Replayed = len(out)
	return out, st, nil
}

// requestOf is a request read back from an allocation: its nodes, and
// an even share of its GPUs, CPUs and memory on each.
func requestOf(r *api.AcctJob) spec.Resources {
	n := max(len(r.Nodes), 1)
	req := spec.Resources{Nodes: n, CPUsPerNode: r.CPUs / n, MemMiB: r.MemMiB / int64(n), GPUProfile: r.GPUProfile}
	switch {
	case r.GPUFraction > 0 && r.GPUFraction < 1:
		req.GPUFraction = r.GPUFraction
	default:
		req.GPUsPerNode = r.GPUCount / n
	}
	return req
}

// normalise is the controller's normalisation at submit
// (controller/submit.go).
func normalise(r *spec.Resources) {
	r.Nodes = max(r.Nodes, 1)
	r.CPUsPerNode = max(r.CPUsPerNode, 1)
	if r.TotalGPUs > 0 && r.GPUsPerNode == 0 {
		r.GPUsPerNode = r.TotalGPUs / r.Nodes
	}
	if r.GPUProfile != "" && r.GPUFraction == 0 && r.GPUsPerNode == 0 {
		r.GPUsPerNode = 1
	}
}

// spread gives a fixed job's nodes their share of its GPUs (the
// record lists the devices, not which node holds each: a UUID is
// matched to its node by the replay's inventory), CPUs and memory.
func spread(j *sim.TwinJob, r *api.AcctJob) {
	n := len(j.Alloc)
	if n == 0 {
		return
	}
	for k := range j.Alloc {
		j.Alloc[k].CPUs = j.Req.CPUsPerNode
		j.Alloc[k].MemMiB = j.Req.MemMiB
		if f := j.Req.GPUFraction; f > 0 && f < 1 {
			j.Alloc[k].GPUFraction = f
		}
	}
	j.Alloc[0].GPUs = slices.Clone(r.GPUs) // the replay moves each to its node
}

func joinMax(s []string, most int) string {
	out := ""
	for i, x := range s {
		if i == most {
			return out + fmt.Sprintf("; and %d more", len(s)-most)
		}
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}
