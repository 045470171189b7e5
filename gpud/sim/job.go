package sim

import (
	"cmp"
	"slices"
	"time"
)

// Job is one trace record in the simulator's terms. Times are offsets from
// the trace's start.
type Job struct {
	// Name is the trace's job id.
	Name string
	// Submit is the arrival time.
	Submit time.Duration
	// Runtime is the true run time from the trace.
	Runtime time.Duration
	// Estimate is the user's runtime estimate (requested time) where the
	// trace has one, else 0.
	Estimate time.Duration
	// Nodes × GPUsPerNode whole GPUs; Nodes ≥ 1.
	Nodes       int
	GPUsPerNode int
	// GPUMilli is a share of one GPU in thousandths (1..999) for a
	// fractional task; 0 means whole GPUs.
	GPUMilli int
	// CPUMilli and MemMiB are per-node requests where the trace has them.
	CPUMilli int
	MemMiB   int64
	// Model restricts the GPU model ("" = any).
	Model string
	// User and Account identify the owner where the trace has them.
	User    string
	Account string
	// Status is the trace's own status string, informational.
	Status string
	// TraceWait is the wait the trace recorded (SWF field 3), or -1.
	TraceWait time.Duration
}

// GPUs is the job's total GPU demand in GPU units (fractions included).
func (j *Job) GPUs() float64 {
	if j.GPUMilli > 0 {
		return float64(j.GPUMilli) / 1000
	}
	return float64(j.Nodes * j.GPUsPerNode)
}

// SortBySubmit orders jobs by arrival, keeping the trace order for ties.
func SortBySubmit(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Submit, b.Submit) })
}
