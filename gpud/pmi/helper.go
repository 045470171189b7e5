package pmi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The PMIx helper (gpud-pmix) is a step's PMIx server on one node: the
// agent execs it into the allocation's container as the job's user
// before the node's tasks, and it speaks with the agent in JSON lines
// over its stdin and stdout (Helper messages):
//
//	agent  → helper  start  (Step): set up the server and the step's namespace
//	helper → agent   env    (Rank, Env): a local task's PMIx variables, one per task
//	helper → agent   ready: every local task can start
//	helper → agent   fence  (Round, Data): the server's contribution to a fence
//	agent  → helper  fenced (Round, Parts or Error): every node's contribution
//	helper → agent   abort  (Code, Error): a task called PMIx_Abort
//	helper → agent   error  (Error): the server failed; the helper exits
//
// The agent closes the helper's stdin when the node's tasks have ended;
// the helper then finalizes the server and exits.

// Helper message kinds.
const (
	HelperStart  = "start"
	HelperEnv    = "env"
	HelperReady  = "ready"
	HelperFence  = "fence"
	HelperFenced = "fenced"
	HelperAbort  = "abort"
	HelperError  = "error"
)

// HelperMsg is one line between the agent and the PMIx helper.
type HelperMsg struct {
	Kind  string      `json:"kind"`
	Step  *HelperStep `json:"step,omitempty"`
	Rank  int         `json:"rank,omitempty"`
	Env   []string    `json:"env,omitempty"`
	Round int         `json:"round,omitempty"`
	Data  []byte      `json:"data,omitempty"`
	Parts [][]byte    `json:"parts,omitempty"`
	Code  int         `json:"code,omitempty"`
	Error string      `json:"error,omitempty"`
}

// HelperStep is the step as the PMIx helper registers it.
type HelperStep struct {
	// Nspace is the step's PMIx namespace ("slurm.pmix.JOB.STEP", as
	// Slurm names it); JobID is "JOB.STEP" (PMIX_JOBID).
	Nspace string `json:"nspace"`
	JobID  string `json:"job_id"`
	// Node is this node's index in Nodes, the step's nodes in step order;
	// Tasks are each node's ranks.
	Node  int      `json:"node"`
	Nodes []string `json:"nodes"`
	Tasks [][]int  `json:"tasks"`
	// TmpDir is where the server puts its rendezvous files and the
	// clients their session directories: inside the job's own /tmp.
	TmpDir string `json:"tmp_dir"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
}

// Size is the step's task count.
func (s HelperStep) Size() int {
	n := 0
	for _, t := range s.Tasks {
		n += len(t)
	}
	return n
}

// Check says what is wrong with a start message's step.
func (s HelperStep) Check() error {
	var errs []error
	if s.Nspace == "" || len(s.Nspace) > 255 {
		errs = append(errs, fmt.Errorf("namespace %q: 1 to 255 characters", s.Nspace))
	}
	if len(s.Nodes) == 0 || len(s.Nodes) != len(s.Tasks) {
		errs = append(errs, fmt.Errorf("%d nodes with %d task lists", len(s.Nodes), len(s.Tasks)))
	} else if s.Node < 0 || s.Node >= len(s.Nodes) {
		errs = append(errs, fmt.Errorf("node index %d of %d nodes", s.Node, len(s.Nodes)))
	} else if len(s.Tasks[s.Node]) == 0 {
		errs = append(errs, fmt.Errorf("node %s has no task", s.Nodes[s.Node]))
	}
	seen := map[int]bool{}
	size := s.Size()
	for _, ts := range s.Tasks {
		for _, r := range ts {
			if r < 0 || r >= size || seen[r] {
				errs = append(errs, fmt.Errorf("rank %d twice or out of 0-%d", r, size-1))
			}
			seen[r] = true
		}
	}
	if s.TmpDir == "" {
		errs = append(errs, errors.New("no temporary directory"))
	}
	return errors.Join(errs...)
}

// maxHelperLine bounds one line: a fence of all nodes' data, in base64.
const maxHelperLine = 8*MaxFenceBytes/3 + 4096

// HelperConn is one end of the agent–helper line protocol. Send is safe
// for concurrent use; Recv is for one reader.
type HelperConn struct {
	mu  sync.Mutex
	w   io.Writer
	enc *json.Encoder
	br  *bufio.Reader
}

// NewHelperConn speaks over r and w.
func NewHelperConn(r io.Reader, w io.Writer) *HelperConn {
	return &HelperConn{w: w, enc: json.NewEncoder(w), br: bufio.NewReaderSize(r, 64<<10)}
}

// Send writes one message.
func (h *HelperConn) Send(m HelperMsg) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.enc.Encode(m)
}

// Recv reads the next message.
func (h *HelperConn) Recv() (HelperMsg, error) {
	var m HelperMsg
	var line []byte
	for {
		chunk, err := h.br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxHelperLine {
			return m, errLineTooLong
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return m, io.ErrUnexpectedEOF
			}
			return m, err
		}
		break
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("PMIx helper message: %w", err)
	}
	return m, nil
}
