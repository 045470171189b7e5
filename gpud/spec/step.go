package spec

import (
	"strconv"
	"strings"
)

// StepBatch is the ID of a job's batch step: the script on the first node
// of the allocation (Slurm's N.batch). Numbered steps (srun) are "0",
// "1", ... in the order the job starts them, across all its nodes.
const StepBatch = "batch"

// Step is one job step as the controller keeps it on its job and
// accounting stores it: the batch script or one srun.
type Step struct {
	// ID is StepBatch or the step's number ("0", "1", ...).
	ID string `json:"id"`
	// Name is the step's command (its first argument); "batch" for the
	// batch step.
	Name     string   `json:"name"`
	State    JobState `json:"state"`
	ExitCode int      `json:"exit_code"`
	// Signal is the signal that ended the step's worst task, 0 if none.
	Signal    int  `json:"exit_signal,omitempty"`
	StartTime Time `json:"start_time"`
	EndTime   Time `json:"end_time"`
	// Nodes are the nodes the step's tasks run on, in step order; NTasks
	// counts them; CPUs and GPUs are what the step holds of the allocation
	// (CPUs 0 when the step did not ask for any: it shares the node's).
	Nodes  []string `json:"nodes"`
	NTasks int      `json:"ntasks"`
	CPUs   int      `json:"cpus,omitempty"`
	GPUs   int      `json:"gpus,omitempty"`
	// Reason says why a step ended other than by its tasks' exit
	// (cancelled by whom, the job ending).
	Reason string `json:"reason,omitempty"`
}

// Running reports whether the step has not ended.
func (s *Step) Running() bool { return s.State == StateRunning || s.State == "" }

// Num is a numbered step's number, or -1 for the batch step (or an ID
// that is not a number).
func (s *Step) Num() int {
	n, err := strconv.Atoi(s.ID)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// StepSignal is a user's request to signal one step of a job (scancel
// --signal N.S) or to cancel it (gpuq cancel N.S: Cancel, with SIGTERM and
// after the node's kill grace SIGKILL, as Slurm's KillWait). The node that
// serves the step acts once per Seq.
type StepSignal struct {
	AllocID string `json:"alloc_id"`
	Step    int    `json:"step"`
	Seq     int    `json:"seq"`
	Signal  string `json:"signal,omitempty"`
	Cancel  bool   `json:"cancel,omitempty"`
	By      string `json:"by,omitempty"`
}

// JobNotice is one scontrol notify message to a running batch job: the
// node running the batch script of allocation AllocID appends it to the
// job's stderr, as Slurm's slurmstepd does ("slurmstepd: error: MSG").
type JobNotice struct {
	AllocID string `json:"alloc_id"`
	Seq     int    `json:"seq"`
	Message string `json:"message"`
	By      string `json:"by,omitempty"`
}

// MaxNotices bounds the notify messages a job keeps for its nodes.
const MaxNotices = 8

// Signal targets (Job.SignalTarget, scancel -b/-f), as Slurm's: a signal
// goes to the steps' tasks and not to the batch shell, to the batch shell
// only (-b, --signal=B:), or to every process of the job (-f).
const (
	SignalSteps = "steps"
	SignalBatch = "batch"
	SignalFull  = "full"
)

// ParseStepRef splits "42.3" (or "42.batch") into the job part and the
// step; a ref without a step returns step "".
func ParseStepRef(s string) (job, step string) {
	job, step, _ = strings.Cut(strings.TrimSpace(s), ".")
	return job, step
}

// JobSteps are steps of one attempt of a job, as the controller hands
// ended steps to accounting.
type JobSteps struct {
	JobID   JobID
	Attempt int
	Steps   []Step
}
