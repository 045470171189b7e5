package step

import (
	"bytes"
	"sync"

	"github.com/gpud/gpud/gpud/api"
)

// relay is a part's output on its way to whoever follows the step: srun
// through this node's agent (a part re-adopted after an agent restart,
// state.go) or the agent that serves the step on another node (a part
// kept for it, keep.go). Attached, it passes the output on; detached, it
// holds it, and while it holds maxHeldOutput the tasks wait on their
// writes: nothing is dropped. A consumer that acknowledges what it has
// (attach's acked) has the output kept until it does, so what a lost
// connection swallowed goes again to the next one; and a consumer that
// follows the part again says what it has, so nothing goes twice.
//
// Output is counted per task and stream (stdout, stderr) from the task's
// start, as srun counts what it receives (api.StepCount). A relay made
// for a re-adopted part starts from what the dead agent had read, which
// nobody here knows: its counts are aligned at its first attach with what
// the consumer has, everything read since being new.
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
	// next is each stream's count of output written, and aligned says
	// it counts from the task's start.
	next    map[streamID]int64
	aligned bool
	closed  bool
	// sp, for a kept part's relay (aligned, its consumer acknowledging),
	// spools what it holds to disk (heldspool.go); nil: memory only.
	sp *heldSpool
}

// streamID names one task's stdout or stderr.
type streamID struct {
	kind string
	task int
}

type heldOutput struct {
	kind string
	task int
	off  int64 // the stream's count before data
	data []byte
}

// newRelay returns a relay for tasks started now (aligned) or re-adopted
// from a dead agent (not).
func newRelay(aligned bool) *relay {
	s := &relay{next: map[streamID]int64{}, aligned: aligned}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *relay) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.closed && s.size >= maxHeldOutput && (s.out == nil || s.acked) {
		s.cond.Wait()
	}
	k := streamID{kind, task}
	off := s.next[k]
	s.next[k] += int64(len(p))
	switch {
	case s.closed:
	case s.out != nil && !s.acked:
		s.out.output(kind, task, p)
	default:
		h := heldOutput{kind, task, off, bytes.Clone(p)}
		if s.sp != nil && !s.sp.append(h) {
			s.sp = nil
		}
		s.held = append(s.held, h)
		s.size += len(p)
		if s.out != nil {
			s.out.output(kind, task, p)
		}
	}
}

// attach sends the held output the consumer does not have (have) to out
// and passes on all that follows. With acked, out acknowledges what it
// received (ack) and output is held until then.
func (s *relay) attach(out sink, acked bool, have []api.StepCount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.aligned {
		// What was read since the re-adoption follows what the consumer
		// has (the dead agent's unsent reads are lost with it).
		for _, c := range have {
			k := streamID{c.Kind, c.Task}
			for i := range s.held {
				if h := &s.held[i]; h.kind == c.Kind && h.task == c.Task {
					h.off += c.Bytes
				}
			}
			s.next[k] += c.Bytes
		}
		s.aligned = true
	}
	s.drop(have)
	for _, h := range s.held {
		out.output(h.kind, h.task, h.data)
	}
	if !acked {
		s.held, s.size = nil, 0
	}
	s.out, s.acked = out, acked
	s.cond.Broadcast()
}

// ack drops the output the consumer has.
func (s *relay) ack(have []api.StepCount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(have)
	s.cond.Broadcast()
}

// drop removes from held what the consumer has; s.mu is held.
func (s *relay) drop(have []api.StepCount) {
	if len(have) == 0 {
		return
	}
	upto := make(map[streamID]int64, len(have))
	for _, c := range have {
		upto[streamID{c.Kind, c.Task}] = c.Bytes
	}
	kept := s.held[:0]
	for _, h := range s.held {
		n := min(upto[streamID{h.kind, h.task}]-h.off, int64(len(h.data)))
		if n > 0 {
			s.size -= int(n)
			h.data, h.off = h.data[n:], h.off+n
		}
		if len(h.data) > 0 {
			kept = append(kept, h)
		}
	}
	clear(s.held[len(kept):])
	s.held = kept
	if s.sp != nil && s.sp.size > heldCompactAt && !s.sp.rewrite(s.next, s.held) {
		s.sp = nil
	}
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
	if s.sp != nil {
		s.sp.close()
		s.sp = nil
	}
	s.cond.Broadcast()
}
