package step

import (
	"bytes"
	"sync"
)

// relay holds a re-adopted step's output until srun reattaches, then
// passes it on; while it holds maxHeldOutput, the tasks wait.
type relay struct {
	mu     sync.Mutex
	cond   *sync.Cond
	out    sink
	held   []heldOutput
	size   int
	closed bool
}

type heldOutput struct {
	kind string
	task int
	data []byte
}

func newRelay() *relay {
	s := &relay{}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *relay) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.out == nil && !s.closed && s.size >= maxHeldOutput {
		s.cond.Wait()
	}
	switch {
	case s.closed:
	case s.out != nil:
		s.out.output(kind, task, p)
	default:
		s.held = append(s.held, heldOutput{kind, task, bytes.Clone(p)})
		s.size += len(p)
	}
}

// attach sends the held output to out, and all that follows.
func (s *relay) attach(out sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		out.output(h.kind, h.task, h.data)
	}
	s.held, s.size, s.out = nil, 0, out
	s.cond.Broadcast()
}

// close drops the held output and all that follows.
func (s *relay) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held, s.size, s.closed = nil, 0, true
	s.cond.Broadcast()
}
