package sched

import (
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// het makes job id component off of the heterogeneous job lead of size.
func het(lead spec.JobID, off, size int) func(*Job) {
	return func(j *Job) { j.HetJobID, j.HetOffset, j.HetSize = lead, off, size }
}

func startedIDs(p Plan) []spec.JobID {
	var ids []spec.JobID
	for _, s := range p.Starts {
		ids = append(ids, s.JobID)
	}
	slices.Sort(ids)
	return ids
}

func TestHetStartsWholeOrNot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []Node
		jobs  []Job
		want  []spec.JobID
		// wait are the jobs that must be pending with reason.
		wait   []spec.JobID
		reason string
	}{
		{
			name:  "a CPU and a GPU component share one node",
			nodes: []Node{node("a", 8, 1000, "h100", 2)},
			jobs:  []Job{job(1, 2, 0, het(1, 0, 2)), job(2, 2, 2, het(1, 1, 2))},
			want:  []spec.JobID{1, 2},
		},
		{
			name: "the GPU component does not fit: neither starts, a lower job does",
			// Component 0 fits, component 1 (3 GPUs) never does now; the
			// CPUs component 0 took are given back to job 3.
			nodes: []Node{node("a", 4, 1000, "h100", 2)},
			jobs: []Job{job(1, 4, 0, het(1, 0, 2), func(j *Job) { j.Priority = 10 }), job(2, 1, 3, het(1, 1, 2), func(j *Job) { j.Priority = 10 }),
				job(3, 4, 0)},
			want:   []spec.JobID{3},
			wait:   []spec.JobID{1, 2},
			reason: spec.ReasonResources,
		},
		{
			name:  "components on different nodes of different partitions",
			nodes: []Node{node("cpu1", 8, 1000, "", 0), func() Node { n := node("gpu1", 8, 1000, "h100", 4); n.Partitions = []string{"gpu"}; return n }()},
			jobs:  []Job{job(5, 8, 0, het(5, 0, 2)), job(6, 8, 4, het(5, 1, 2), func(j *Job) { j.Partition = "gpu" })},
			want:  []spec.JobID{5, 6},
		},
		{
			name:   "a held component holds the group",
			nodes:  []Node{node("a", 8, 1000, "h100", 2)},
			jobs:   []Job{job(1, 1, 0, het(1, 0, 2)), job(2, 1, 1, het(1, 1, 2), func(j *Job) { j.Held = true })},
			wait:   []spec.JobID{1, 2},
			reason: spec.ReasonHeld,
		},
		{
			name:   "a component missing from the queue: the others wait",
			nodes:  []Node{node("a", 8, 1000, "h100", 2)},
			jobs:   []Job{job(1, 1, 0, het(1, 0, 3)), job(2, 1, 1, het(1, 1, 3))},
			wait:   []spec.JobID{1, 2},
			reason: spec.ReasonResources,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			snap := &Snapshot{Nodes: tt.nodes, Jobs: tt.jobs, Partitions: []Partition{{Name: "batch"}, {Name: "gpu"}}}
			plan := Schedule(snap, t0, Config{})
			if got := startedIDs(plan); !slices.Equal(got, tt.want) {
				t.Fatalf("started %v, want %v; pending %+v", got, tt.want, plan.Pending)
			}
			for _, id := range tt.wait {
				i := slices.IndexFunc(plan.Pending, func(p Pending) bool { return p.JobID == id })
				if i < 0 || plan.Pending[i].Reason != tt.reason {
					t.Errorf("job %d: want pending %s, plan pending %+v", id, tt.reason, plan.Pending)
				}
			}
			// What the plan hands out never overlaps: no GPU twice.
			seen := map[string]bool{}
			for _, s := range plan.Starts {
				for _, a := range s.Nodes {
					for _, g := range a.GPUs {
						if seen[g] {
							t.Errorf("GPU %s given twice", g)
						}
						seen[g] = true
					}
				}
			}
		})
	}
}
