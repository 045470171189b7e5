package api

import (
	"context"
	"net/http"

	"github.com/gpud/gpud/gpud/spec"
)

// Steps over the network (DESIGN §7 "Allocations and steps"). Every node
// agent with a node certificate (joined with the join token) serves a
// step listener (TCP + TLS, [node] step_listen, default :6818). Two kinds
// of caller speak to it, each opening with one StepHello line (JSON):
//
//   - a peer agent (mutual TLS: a node certificate of the cluster CA, the
//     node name as CN) asking this node to run its share of a step of an
//     allocation the controller assigned to both (StepHello.Part); the
//     stream then is the one srun speaks on the step socket, for this
//     node's tasks only: StepSignal and StepStdin in, frames out
//     (ReadStepFrame) ending with StepDone or StepError;
//   - srun outside the job's containers (a login host, a salloc shell),
//     presenting the allocation's step ticket (StepHello.Ticket, from
//     POST /v1/jobs/{id}/step-ticket, which only the job's owner or root
//     may call); then it speaks exactly as on the job's step socket: a
//     StepRequest line (unless StepHello.Step carries it), and so on.
//
// A caller verifies the listener's certificate against the cluster CA
// and checks it names the node it meant to reach.

// DefaultStepPort is the step listener's port when [node] step_listen
// names none (Slurm's slurmd port).
const DefaultStepPort = 6818

// StepHello opens a connection to a node's step listener.
type StepHello struct {
	// Alloc is the allocation the step runs in.
	Alloc string `json:"alloc"`
	// Ticket is the allocation's step ticket (srun); empty for a peer.
	Ticket string `json:"ticket,omitempty"`
	// Step is srun's request (with Ticket).
	Step *StepRequest `json:"step,omitempty"`
	// Part is a peer's request: this node's tasks of a step.
	Part *StepPart `json:"part,omitempty"`
	// Probe (with Ticket) asks whether every node of the allocation can
	// run tasks yet: the answer is StepDone once a `true` ran on each, or
	// StepError (srun and salloc wait for a new allocation with it).
	Probe bool `json:"probe,omitempty"`
	// Holds (a peer) asks whether this node holds its part of Alloc (its
	// container runs): StepDone if it does, StepError with Retry while
	// not yet. The first node starts a batch script only once every node
	// holds its part (gang start).
	Holds bool `json:"holds,omitempty"`
	// NumberStep (a peer serving a step of Alloc: srun in a task on its
	// node) asks the allocation's first node for the step's number, so
	// that steps are numbered per job wherever srun runs: StepStarted
	// with Step.
	NumberStep bool `json:"number_step,omitempty"`
}

// StepPart is one node's share of a step, as the step's first agent asks
// a peer for it.
type StepPart struct {
	Step      int   `json:"step"`
	NodeIndex int   `json:"node_index"`
	Tasks     []int `json:"tasks"`
	// GPUIdx are the step's GPUs among the node's devices (its ledger's
	// grant), null for all of them; empty is none.
	GPUIdx []int `json:"gpu_idx"`
	// GPUsPerTask, GPUBindSingle and GPUBindMap share them among the
	// node's tasks: --gpus-per-task, --gpu-bind=single:N and
	// --gpu-bind=map_gpu:LIST.
	GPUsPerTask   int   `json:"gpus_per_task,omitempty"`
	GPUBindSingle int   `json:"gpu_bind_single,omitempty"`
	GPUBindMap    []int `json:"gpu_bind_map,omitempty"`
	// GPUBindMask is --gpu-bind=mask_gpu:LIST, each mask as GPU indices.
	GPUBindMask [][]int  `json:"gpu_bind_mask,omitempty"`
	Args        []string `json:"args"`
	Env         []string `json:"env"`
	Cwd         string   `json:"cwd,omitempty"`
	// Stdin says StepStdin messages follow for the part's task 0 (the
	// step's task 0).
	Stdin bool `json:"stdin,omitempty"`
	// Pty runs the part's task 0 (the step's task 0) on a terminal of
	// Rows x Cols (srun --pty; StepResize messages follow), and drops the
	// other tasks' output, as srun --pty does.
	Pty  bool `json:"pty,omitempty"`
	Rows int  `json:"rows,omitempty"`
	Cols int  `json:"cols,omitempty"`
	// MPI is the step's --mpi (pmi2, pmix; empty: none): the node runs
	// the step's PMI server for its tasks, which fences through the
	// connection (StepPMIFence). StepNodes and StepTasks are the whole
	// step's nodes and each one's tasks, which the PMI servers publish.
	MPI       string   `json:"mpi,omitempty"`
	StepNodes []string `json:"step_nodes,omitempty"`
	StepTasks [][]int  `json:"step_tasks,omitempty"`
	// CPUBind, Hint, Distribution and CPUsPerTask bind each task's CPUs
	// (srun --cpu-bind, --hint, --distribution, -c); GPUClosest keeps
	// each task's GPUs on its CPUs' NUMA nodes (--gpu-bind=closest).
	CPUBind      string `json:"cpu_bind,omitempty"`
	Hint         string `json:"hint,omitempty"`
	Distribution string `json:"distribution,omitempty"`
	CPUsPerTask  int    `json:"cpus_per_task,omitempty"`
	GPUClosest   bool   `json:"gpu_closest,omitempty"`
	// Resumable says the caller follows the part again after a lost
	// connection (either agent restarted): it acknowledges the output it
	// received (StepAck) and, once the step ended, the part's StepDone
	// with a StepDone of its own. The peer keeps a part whose connection
	// drops, holding its output (bounded; the tasks then wait) and its
	// exits, until the caller follows it again (StepFlagAttach) or the
	// reattach grace (2 minutes) passes; then its tasks are killed. An
	// older peer ignores it and kills a dropped part's tasks.
	Resumable bool `json:"resumable,omitempty"`
	// Received, with StepFlagAttach, is the part's output the caller (or
	// its srun) has: the part sends only what follows.
	Received []StepCount `json:"received,omitempty"`
	// Flags name what a new kind of step needs of each node (a TTY, say)
	// without a new call; an agent refuses a part with a flag it does not
	// know (StepPartFlags), so an older peer never runs it half-way.
	Flags []string `json:"flags,omitempty"`
}

// StepFlagAttach says the hello follows this node's running part of
// step Step (node NodeIndex of the step) again, after a lost connection:
// no task starts; the answer is StepStarted, the output not yet
// acknowledged, every exit so far, and then the part as before. An
// older agent refuses it rather than start the tasks a second time.
const StepFlagAttach = "attach"

// StepFlagGPUs says the part's GPUIdx and GPU binding must be honoured
// (an agent before them would give the tasks all the node's GPUs).
const StepFlagGPUs = "gpus"

// StepFlagPty says the part's Pty must be honoured (an agent before it
// would run task 0 without a terminal and send every task's output).
const StepFlagPty = "pty"

// StepFlagMPI says the part's MPI must be honoured (an agent before it
// would start the tasks without their PMI server).
const StepFlagMPI = "mpi"

// StepFlagBind says the part's CPU binding (and --gpu-bind=closest) must
// be honoured.
const StepFlagBind = "bind"

// StepPartFlags are the StepPart flags this agent knows.
var StepPartFlags = []string{StepFlagGPUs, StepFlagPty, StepFlagAttach, StepFlagMPI, StepFlagBind}

// StepTicketResponse is POST /v1/jobs/{id}/step-ticket: what srun outside
// the job needs to start steps in its allocation.
type StepTicketResponse struct {
	JobID spec.JobID `json:"job_id"`
	Alloc string     `json:"alloc"`
	// Ticket admits steps in Alloc at its nodes' step listeners, for
	// five minutes and while the credential it was obtained with is not
	// revoked: ask for one for every connection.
	Ticket string `json:"ticket"`
	// Nodes are the allocation's nodes by rank, with their step
	// listeners' addresses (host:port; empty where a node has none).
	Nodes []StepNode `json:"nodes"`
	// CA is the cluster CA (PEM) the listeners' certificates chain to.
	CA string `json:"ca,omitempty"`
}

// StepNode is one node of an allocation as srun reaches it.
type StepNode struct {
	Name     string `json:"name"`
	StepAddr string `json:"step_addr,omitempty"`
}

// StepTicket asks for job id's step ticket (owner or root only).
func (c *Client) StepTicket(ctx context.Context, id spec.JobID) (StepTicketResponse, error) {
	var out StepTicketResponse
	err := c.do(ctx, http.MethodPost, "/jobs/"+spec.JobRef{ID: id}.String()+"/step-ticket", nil, struct{}{}, &out)
	return out, err
}
