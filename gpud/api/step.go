package api

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Job steps: srun inside a job talks to its node agent over the job's own
// unix socket (EnvStepSocket, bind-mounted into the allocation container),
// so the socket a request arrives on names the allocation; a job cannot
// reach another job's socket. srun sends JSON, one value per line: a
// StepRequest, then StepMsg values of kind StepSignal. The agent answers
// with frames (ReadStepFrame): StepMsg values as JSON, and the tasks'
// output as raw bytes; it ends with StepDone or StepError.

// EnvStepSocket names the job's step socket inside the job.
const EnvStepSocket = "GPUD_STEP_SOCKET"

// StepRequest asks for a step: ntasks processes laid out in blocks over
// the allocation's nodes. Zero values take Slurm's defaults.
type StepRequest struct {
	NTasks        int  `json:"ntasks,omitempty"`
	Nodes         int  `json:"nodes,omitempty"`
	NTasksPerNode int  `json:"ntasks_per_node,omitempty"`
	CPUsPerTask   int  `json:"cpus_per_task,omitempty"`
	GPUsPerTask   int  `json:"gpus_per_task,omitempty"`
	KillOnBadExit bool `json:"kill_on_bad_exit,omitempty"`
	Overlap       bool `json:"overlap,omitempty"`
	// Exclusive and Exact limit the step's CPUs to what its tasks ask
	// (srun --exclusive, --exact; -c implies it); without them a step gets
	// all the allocation's CPUs on its nodes.
	Exclusive bool `json:"exclusive,omitempty"`
	Exact     bool `json:"exact,omitempty"`
	// GPUs (-G, in all) and GPUsPerNode limit the step's GPUs; without
	// them or GPUsPerTask a step gets all the allocation's GPUs on its nodes.
	GPUs        int `json:"gpus,omitempty"`
	GPUsPerNode int `json:"gpus_per_node,omitempty"`
	// NodeList (-w, a hostlist) names nodes of the allocation the step
	// must run on; GPUBind is srun's --gpu-bind.
	NodeList string `json:"nodelist,omitempty"`
	GPUBind  string `json:"gpu_bind,omitempty"`
	// MPI is srun's --mpi (none, pmi2, pmix; empty: the site's
	// mpi_default). CPUBind, Hint and Distribution are --cpu-bind, --hint
	// and --distribution as srun checked them (gpud/cpubind).
	MPI          string `json:"mpi,omitempty"`
	CPUBind      string `json:"cpu_bind,omitempty"`
	Hint         string `json:"hint,omitempty"`
	Distribution string `json:"distribution,omitempty"`
	// Stdin says srun sends its input (StepStdin) for task 0.
	Stdin bool `json:"stdin,omitempty"`
	// Pty runs task 0 on a terminal (srun --pty) of Rows x Cols; its
	// output comes as StepStdout, srun sends keys as StepStdin and size
	// changes as StepResize (steptty.go).
	Pty  bool `json:"pty,omitempty"`
	Rows int  `json:"rows,omitempty"`
	Cols int  `json:"cols,omitempty"`
	// Attach, with Step, asks to follow a running step again: srun
	// reconnecting after the node agent restarted (steptty.go), with the
	// output it Received so far.
	Attach   bool        `json:"attach,omitempty"`
	Step     int         `json:"step,omitempty"`
	Received []StepCount `json:"received,omitempty"`
	// Key names this request, the same when srun sends it again (its
	// node agent died before it answered, or did not answer yet): a
	// restarted agent that finds the step it started for the key
	// follows it (as Attach) instead of starting a second one. srun
	// makes one per step: 128 random bits, hex.
	Key  string   `json:"key,omitempty"`
	Args []string `json:"args"`
	// Env is the tasks' environment (srun's, filtered by --export); the
	// agent adds the node's and the step's variables over it.
	Env []string `json:"env"`
	Cwd string   `json:"cwd,omitempty"`
	// HetGroup is srun --het-group=N plus one (0: not given): the step
	// runs in component N of the heterogeneous job, whichever
	// component's step socket srun reached.
	HetGroup int `json:"het_group,omitempty"`
}

// Step message kinds.
const (
	StepStarted = "started" // Step, NTasks, Nodes, TasksPerNode: the step runs
	StepWaiting = "waiting" // Error: why the step waits for resources of its allocation
	StepLayout  = "layout"  // Step, NTasks, Nodes, TasksPerNode: before the tasks start (and write output)
	StepStdout  = "out"     // Task, Data
	StepStderr  = "err"     // Task, Data
	StepExit    = "exit"    // Task, Node, Code, Signal
	StepDone    = "done"    // Code: the highest task exit code
	StepError   = "error"   // Error: the step could not run
	StepSignal  = "signal"  // srun to agent: Signal for every task
	StepStdin   = "in"      // srun to agent: Data for task 0's stdin; empty Data is EOF
	// Between agents only (a step's part on a peer and the agent of the
	// step's first node), for srun --mpi: a node's contribution to a
	// fence of the step's PMI servers (Round, Data) and, back, every
	// node's (Round, Parts, or Error); a task's PMI abort (Code, Error).
	StepPMIFence = "pmi_fence"
	StepPMIAbort = "pmi_abort"
	// StepAck is agent to peer (StepPart.Resumable): Counts of the part's
	// output received so far. Agent to srun, a count of Kind StepStdin is
	// how many bytes of srun's input task 0 has (written into its stdin):
	// srun keeps its input from there on until acknowledged.
	StepAck = "ack"
)

// StepMsg is one message of a step stream.
type StepMsg struct {
	Kind   string   `json:"kind"`
	Step   int      `json:"step,omitempty"`
	Task   int      `json:"task,omitempty"`
	NTasks int      `json:"ntasks,omitempty"`
	Nodes  []string `json:"nodes,omitempty"`
	// TasksPerNode counts the step's tasks on each of Nodes (block
	// layout: node i runs the next TasksPerNode[i] task IDs).
	TasksPerNode []int `json:"tasks_per_node,omitempty"`
	// TaskNodes is each task's node (index into Nodes) when the layout
	// is not in blocks (--distribution=cyclic or plane).
	TaskNodes []int  `json:"task_nodes,omitempty"`
	Node      string `json:"node,omitempty"`
	Data      []byte `json:"data,omitempty"`
	Code      int    `json:"code,omitempty"`
	Signal    int    `json:"signal,omitempty"`
	Error     string `json:"error,omitempty"`
	// Rows and Cols are a StepResize's terminal size.
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
	// Round and Parts are a PMI fence's (StepPMIFence).
	Round int      `json:"round,omitempty"`
	Parts [][]byte `json:"parts,omitempty"`
	// Counts are a StepAck's output received, per task and stream, or
	// (Kind StepStdin) task 0's input acknowledged. A StepStarted with a
	// StepStdin count says the agent acknowledges srun's input: on a
	// step's start its count is 0, and when srun follows the step again
	// after an agent restart it is where srun sends its input again from
	// (what the old agent took but never wrote into the task's stdin was
	// lost with it).
	Counts []StepCount `json:"counts,omitempty"`
	// Retry, with StepError, says the agent cannot answer yet (it is
	// starting its part of the allocation, or restarting): ask again.
	Retry bool `json:"retry,omitempty"`
}

// StepCount is how much of one task's stdout or stderr a reader has: the
// bytes from the task's start. A reader that follows a step again says
// what it has (StepRequest.Received, StepPart.Received), so that output
// a lost connection delivered before it broke is not sent twice.
type StepCount struct {
	Task  int    `json:"task"`
	Kind  string `json:"kind"` // StepStdout or StepStderr (StepStdin: task 0's input)
	Bytes int64  `json:"bytes"`
}

// Frame types of the agent's answer stream.
const (
	frameJSON   = 'J' // a StepMsg as one JSON line
	frameStdout = 'O' // task (4 bytes, big endian), length (4 bytes), data
	frameStderr = 'E'
)

// maxStepData bounds one output frame's data.
const maxStepData = 1 << 20

// WriteStepMsg writes m as a frame to w.
func WriteStepMsg(w io.Writer, m StepMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(append([]byte{frameJSON}, b...), '\n')
	_, err = w.Write(b)
	return err
}

// WriteStepOutput writes task's output data as frames to w (kind is
// StepStdout or StepStderr).
func WriteStepOutput(w io.Writer, kind string, task int, data []byte) error {
	t := byte(frameStdout)
	if kind == StepStderr {
		t = frameStderr
	}
	for len(data) > 0 {
		n := min(len(data), maxStepData)
		var h [9]byte
		h[0] = t
		binary.BigEndian.PutUint32(h[1:5], uint32(task))
		binary.BigEndian.PutUint32(h[5:9], uint32(n))
		if _, err := w.Write(h[:]); err != nil {
			return err
		}
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// ReadStepFrame reads the next frame of an answer stream as a StepMsg
// (output frames as StepStdout or StepStderr with Task and Data).
func ReadStepFrame(r *bufio.Reader) (StepMsg, error) {
	var m StepMsg
	t, err := r.ReadByte()
	if err != nil {
		return m, err
	}
	switch t {
	case frameJSON:
		line, err := r.ReadBytes('\n')
		if err != nil {
			return m, err
		}
		return m, json.Unmarshal(line, &m)
	case frameStdout, frameStderr:
		var h [8]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return m, err
		}
		n := binary.BigEndian.Uint32(h[4:])
		if n > maxStepData {
			return m, fmt.Errorf("step output frame of %d bytes exceeds %d", n, maxStepData)
		}
		m.Kind, m.Task, m.Data = StepStdout, int(binary.BigEndian.Uint32(h[:4])), make([]byte, n)
		if t == frameStderr {
			m.Kind = StepStderr
		}
		_, err := io.ReadFull(r, m.Data)
		return m, err
	default:
		return m, fmt.Errorf("bad step frame type %q", t)
	}
}
