package sched

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// TestAccountLimits checks each account limit in the pure core: running
// GPUs and jobs over every QOS, max wall, and the GPU-hour budget, with
// jobs of other accounts unaffected.
func TestAccountLimits(t *testing.T) {
	t.Parallel()
	acct := func(a string) func(*Job) { return func(j *Job) { j.Account = a; j.User = "u" } }
	hours := func(h int) func(*Job) { return func(j *Job) { j.TimeLimit = time.Duration(h) * time.Hour } }
	// One GPU of node a already runs a 1-GPU job of account "lab" in QOS "high".
	busy := node("a", 16, 1000, "h100", 8)
	busy.GPUs[0].Free = false
	running := []RunningJob{{ID: 100, Account: "lab", User: "u", QOS: "high", Start: t0.Add(-time.Hour),
		Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: []string{"GPU-a-0"}}}}}
	qos := []QOS{{Name: "normal"}, {Name: "high"}}
	tests := []struct {
		name   string
		limit  AccountLimit
		jobs   []Job
		starts []spec.JobID
		want   map[spec.JobID]string // pending job → detail
	}{
		{
			name:   "max GPUs counts running jobs of every QOS, then this cycle's starts",
			limit:  AccountLimit{Account: "lab", MaxGPUs: 4},
			jobs:   []Job{job(1, 1, 2, acct("lab")), job(2, 1, 2, acct("lab")), job(3, 1, 2, acct("other"))},
			starts: []spec.JobID{1, 3},
			want:   map[spec.JobID]string{2: "account lab would exceed max 4 GPUs (3 running)"},
		},
		{
			name:   "max running jobs",
			limit:  AccountLimit{Account: "lab", MaxJobs: 2},
			jobs:   []Job{job(1, 1, 0, acct("lab")), job(2, 1, 0, acct("lab"))},
			starts: []spec.JobID{1},
			want:   map[spec.JobID]string{2: "account lab at max 2 running jobs"},
		},
		{
			name:   "max wall, and no time limit counts as over it",
			limit:  AccountLimit{Account: "lab", MaxWall: 2 * time.Hour},
			jobs:   []Job{job(1, 1, 1, acct("lab"), hours(2)), job(2, 1, 1, acct("lab"), hours(3)), job(3, 1, 1, acct("lab"))},
			starts: []spec.JobID{1},
			want: map[spec.JobID]string{2: "time limit over account lab max wall 2h0m0s",
				3: "time limit over account lab max wall 2h0m0s"},
		},
		{
			name:   "budget: a job that would overrun it waits, a small one starts, CPU-only jobs are free",
			limit:  AccountLimit{Account: "lab", MaxGPUHours: 10, UsedGPUHours: 6},
			jobs:   []Job{job(1, 1, 4, acct("lab"), hours(2)), job(2, 1, 2, acct("lab"), hours(2)), job(3, 1, 0, acct("lab"))},
			starts: []spec.JobID{2, 3},
			want:   map[spec.JobID]string{1: "job needs up to 8.0 GPU-hours; account lab has 4.0 of its 10 left"},
		},
		{
			name:  "budget spent",
			limit: AccountLimit{Account: "lab", MaxGPUHours: 10, UsedGPUHours: 10.5},
			jobs:  []Job{job(1, 1, 1, acct("lab"), hours(1))},
			want:  map[spec.JobID]string{1: "account lab spent its GPU-hour budget (10.5 of 10)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i := range tc.jobs {
				tc.jobs[i].QOS = "normal"
			}
			snap := &Snapshot{Nodes: []Node{busy}, Jobs: tc.jobs, Running: running, QOS: qos,
				AccountLimits: []AccountLimit{tc.limit}}
			plan := Schedule(snap, t0, Config{})
			var starts []spec.JobID
			for _, s := range plan.Starts {
				starts = append(starts, s.JobID)
			}
			if diff := cmp.Diff(tc.starts, starts); diff != "" {
				t.Errorf("starts (-want +got):\n%s", diff)
			}
			got := map[spec.JobID]string{}
			for _, p := range plan.Pending {
				if p.Reason != spec.ReasonAccountLimit {
					t.Errorf("job %d pending %s (%s), want %s", p.JobID, p.Reason, p.Detail, spec.ReasonAccountLimit)
				}
				got[p.JobID] = p.Detail
			}
			if diff := cmp.Diff(tc.want, got, cmpEmptyMap); diff != "" {
				t.Errorf("pending (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpEmptyMap = cmp.Transformer("nilmap", func(m map[spec.JobID]string) map[spec.JobID]string {
	if len(m) == 0 {
		return nil
	}
	return m
})
