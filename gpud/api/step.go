package api

// Job steps: srun inside a job talks to its node agent over the job's own
// unix socket (EnvStepSocket, bind-mounted into the allocation container),
// so the socket a request arrives on names the allocation; a job cannot
// reach another job's socket. The stream is JSON, one value per line:
// srun sends a StepRequest, then StepMsg values of kind StepSignal; the
// agent answers with StepMsg values and ends with StepDone or StepError.

// EnvStepSocket names the job's step socket inside the job.
const EnvStepSocket = "GPUD_STEP_SOCKET"

// StepRequest asks for a step: ntasks processes laid out in blocks over
// the allocation's nodes. Zero values take Slurm's defaults.
type StepRequest struct {
	NTasks        int      `json:"ntasks,omitempty"`
	Nodes         int      `json:"nodes,omitempty"`
	NTasksPerNode int      `json:"ntasks_per_node,omitempty"`
	CPUsPerTask   int      `json:"cpus_per_task,omitempty"`
	GPUsPerTask   int      `json:"gpus_per_task,omitempty"`
	KillOnBadExit bool     `json:"kill_on_bad_exit,omitempty"`
	Overlap       bool     `json:"overlap,omitempty"`
	Args          []string `json:"args"`
	// Env is the tasks' environment (srun's, filtered by --export); the
	// agent adds the node's and the step's variables over it.
	Env []string `json:"env"`
	Cwd string   `json:"cwd,omitempty"`
}

// Step message kinds.
const (
	StepStarted = "started" // Step, NTasks, Nodes: the step runs
	StepStdout  = "out"     // Task, Data
	StepStderr  = "err"     // Task, Data
	StepExit    = "exit"    // Task, Node, Code, Signal
	StepDone    = "done"    // Code: the highest task exit code
	StepError   = "error"   // Error: the step could not run
	StepSignal  = "signal"  // srun to agent: Signal for every task
)

// StepMsg is one message of a step stream.
type StepMsg struct {
	Kind   string   `json:"kind"`
	Step   int      `json:"step,omitempty"`
	Task   int      `json:"task,omitempty"`
	NTasks int      `json:"ntasks,omitempty"`
	Nodes  []string `json:"nodes,omitempty"`
	Node   string   `json:"node,omitempty"`
	Data   []byte   `json:"data,omitempty"`
	Code   int      `json:"code,omitempty"`
	Signal int      `json:"signal,omitempty"`
	Error  string   `json:"error,omitempty"`
}
