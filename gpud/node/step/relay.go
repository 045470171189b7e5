package step

import (
	"bytes"
	"sync"
)

// relay is a part's output on its way to whoever follows the step: srun
// through this node's agent (a part re-adopted after an agent restart,
// state.go) or the agent that serves the step on another node (a part
// kept for it, keep.go). Attached, it passes the output on; detached, it
// holds it, and while it holds maxHeldOutput the tasks wait on their
// writes: nothing is dropped. A consumer that acknowledges what it
// received (attach's acked) has the output kept until it does, so what a
// lost connection swallowed goes again to the next one.
type relay struct {
	mu    sync.Mutex
	cond  *sync.Cond
	out   sink
	acked bool
	// held is the output not yet passed on, and with an acked consumer
	// also what was passed on but not acknowledged, in order; size
	// counts its bytes.
	held []heldOutput
	size int
	// base is the output offset of held's first byte; from is the offset
	// at which the current consumer's count starts.
	base, from int64
	closed     bool
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
	for !s.closed && s.size >= maxHeldOutput && (s.out == nil || s.acked) {
		s.cond.Wait()
	}
	switch {
	case s.closed:
	case s.out != nil && !s.acked:
		s.out.output(kind, task, p)
	default:
		s.held = append(s.held, heldOutput{kind, task, bytes.Clone(p)})
		s.size += len(p)
		if s.out != nil {
			s.out.output(kind, task, p)
		}
	}
}

// attach sends the held output to out and passes on all that follows.
// With acked, out acknowledges what it received (ack) and output is held
// until then.
func (s *relay) attach(out sink, acked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		out.output(h.kind, h.task, h.data)
	}
	s.from = s.base
	if !acked {
		s.base += int64(s.size)
		s.held, s.size = nil, 0
	}
	s.out, s.acked = out, acked
	s.cond.Broadcast()
}

// ack drops the output the consumer has: n bytes since it attached.
func (s *relay) ack(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	upto := s.from + n
	for len(s.held) > 0 && upto > s.base {
		h := &s.held[0]
		k := int(min(upto-s.base, int64(len(h.data))))
		h.data = h.data[k:]
		s.base += int64(k)
		s.size -= k
		if len(h.data) == 0 {
			s.held = s.held[1:]
		}
	}
	s.cond.Broadcast()
}

// detach holds the output again: the consumer's connection is gone.
func (s *relay) detach() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = nil
	s.cond.Broadcast()
}

// close drops the held output and all that follows.
func (s *relay) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held, s.size, s.closed = nil, 0, true
	s.cond.Broadcast()
}
