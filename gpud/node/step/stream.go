package step

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"sync"

	"github.com/gpud/gpud/gpud/api"
)

// stream writes StepMsg frames to srun (or to the agent that serves a
// peer's step); safe for concurrent use.
type stream struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	err error
	// gate, while set, holds tasks' output back until the step is
	// recorded (the writers wait, so a task blocks on its full pipe): an
	// srun that has seen a task's output has been told the step started
	// and can follow it again after an agent restart (state.go).
	gate chan struct{}
	// early is this node's tasks' output taken while output is held
	// (outputEarly), in order, and spools where it is kept on disk until
	// it is passed on (early.go).
	early     []heldOutput
	earlySize int
	spools    []*spool
	// releasedHook, when set (tests), is called once the early output
	// was passed on and before its spools are removed.
	releasedHook func()
}

func newStream(w io.Writer) *stream { return &stream{bw: bufio.NewWriter(w)} }

// holdOutput makes output wait until releaseOutput.
func (s *stream) holdOutput() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *stream) releaseOutput() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		return
	}
	for _, h := range s.early {
		if s.err == nil {
			s.err = api.WriteStepOutput(s.bw, h.kind, h.task, h.data)
		}
	}
	if s.err == nil {
		s.err = s.bw.Flush()
	}
	if h := s.releasedHook; h != nil {
		h()
	}
	// Passed on: no later read is spooled (a restarted agent aligns its
	// counts with a spool only when it holds all the old agent read).
	for _, sp := range s.spools {
		sp.remove()
	}
	s.early, s.earlySize, s.spools = nil, 0, nil
	close(s.gate)
	s.gate = nil
}

// outputEarly is output for this node's tasks: while output is held, it
// is spooled (early.go) and queued, and the writer goes on (the copier
// reads on) until maxEarlyOutput is queued; once released, as output.
func (s *stream) outputEarly(kind string, task int, p []byte, sp *spool) {
	s.mu.Lock()
	if s.gate == nil || sp.add(kind, task, p) != nil {
		s.mu.Unlock()
		s.output(kind, task, p)
		return
	}
	defer s.mu.Unlock()
	if !slices.Contains(s.spools, sp) {
		s.spools = append(s.spools, sp)
	}
	s.early = append(s.early, heldOutput{kind: kind, task: task, data: bytes.Clone(p)})
	s.earlySize += len(p)
	for s.gate != nil && s.earlySize >= maxEarlyOutput {
		g := s.gate
		s.mu.Unlock()
		<-g
		s.mu.Lock()
	}
}

func (s *stream) send(m api.StepMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if s.err = api.WriteStepMsg(s.bw, m); s.err == nil {
		s.err = s.bw.Flush()
	}
}

// output writes a task's output as frames.
func (s *stream) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.gate != nil {
		g := s.gate
		s.mu.Unlock()
		<-g
		s.mu.Lock()
	}
	if s.err == nil {
		if s.err = api.WriteStepOutput(s.bw, kind, task, p); s.err == nil {
			s.err = s.bw.Flush()
		}
	}
}

// sink takes tasks' output: srun's stream, or a re-adopted step's relay
// holding it until srun reattaches (relay.go).
type sink interface {
	output(kind string, task int, p []byte)
}

// taskWriter turns a task's output into output frames.
type taskWriter struct {
	s    sink
	kind string
	task int
}

func (w taskWriter) Write(p []byte) (int, error) {
	// srun gone: the output is dropped, the task runs on until killed.
	w.s.output(w.kind, w.task, p)
	return len(p), nil
}
