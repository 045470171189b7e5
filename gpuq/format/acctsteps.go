package format

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// ExpandSteps lists each job and under it its steps (N.batch, N.0, N.1,
// ...), as sacct does; keep, when set, says which rows stay (step "" is
// the job's own row).
func ExpandSteps(jobs []api.AcctJob, keep func(j *api.AcctJob, step string) bool) []api.AcctJob {
	out := make([]api.AcctJob, 0, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		if keep == nil || keep(j, "") {
			out = append(out, *j)
		}
		for k := range j.Steps {
			s := &j.Steps[k]
			if keep == nil || keep(j, s.ID) {
				out = append(out, StepAcct(j, s))
			}
		}
	}
	return out
}

// StepAcct is a step as an accounting row: the job's identity, the step's
// own name, state, exit code, times, nodes, tasks and resources, and
// StepID set.
func StepAcct(j *api.AcctJob, s *api.AcctStep) api.AcctJob {
	r := api.AcctJob{AcctRecord: api.AcctRecord{ID: j.ID, Name: s.Name, User: j.User, UID: j.UID, Account: j.Account, QOS: j.QOS,
		State: s.State, Reason: s.Reason, ExitCode: s.ExitCode, Signal: s.Signal, SubmitTime: s.StartTime,
		EligibleTime: s.StartTime, StartTime: s.StartTime, EndTime: s.EndTime, Nodes: s.Nodes,
		GPUCount: s.GPUs, GPUModel: j.GPUModel, CPUs: s.CPUs, NTasks: s.NTasks, Elapsed: s.Elapsed,
		WorkDir: j.WorkDir, ArrayJobID: j.ArrayJobID, ArrayTaskID: j.ArrayTaskID,
		HetJobID: j.HetJobID, HetOffset: j.HetOffset, WCKey: j.WCKey}, StepID: s.ID}
	if r.CPUs == 0 && len(j.Nodes) > 0 {
		// A step that asked for no CPUs shares its nodes' part of the
		// allocation.
		r.CPUs = j.CPUs * len(s.Nodes) / len(j.Nodes)
	}
	if r.State == "" {
		r.State = spec.StateRunning
	}
	if s.ID == spec.StepBatch {
		// The job's memory peak is its cgroup's, every step's tasks
		// together (gpud has no cgroup per step): it shows on the job's
		// row and its batch step's, where tools such as seff look.
		r.MaxRSSMiB, r.AveRSSMiB, r.MaxRSSNode = j.MaxRSSMiB, j.AveRSSMiB, j.MaxRSSNode
	}
	return r
}

// LiveSteps are a queued job's steps as accounting shows them, the batch
// step first and then by number.
func LiveSteps(j *spec.Job, now time.Time) []api.AcctStep {
	if len(j.Steps) == 0 {
		return nil
	}
	out := make([]api.AcctStep, len(j.Steps))
	for i, s := range j.Steps {
		out[i].Step = s
		out[i].Elapsed = int64(stepTime(&s, now) / time.Second)
	}
	slices.SortStableFunc(out, func(a, b api.AcctStep) int { return cmp.Compare(a.Num(), b.Num()) })
	return out
}

// AcctJobID is a row's job id as sacct writes it: 42, or 42.batch and
// 42.0 for steps.
func AcctJobID(id string, j *api.AcctJob) string {
	if j.StepID != "" {
		return id + "." + j.StepID
	}
	return id
}
