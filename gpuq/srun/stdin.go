package srun

import (
	"io"
	"slices"

	"github.com/gpud/gpud/gpud/api"
)

// srun's input to task 0, acknowledged end to end (gpud/node/step,
// stdin.go): an agent that acknowledges input says so in its StepStarted
// (a count of Kind StepStdin); srun then keeps what it sent until task 0's
// agent acknowledges it written into the task's stdin, and when it
// follows the step again after that agent restarted it sends its input
// again from the count the restarted agent gives. Nothing srun read is
// lost to a kill -9 of the agent. With an agent that does not acknowledge
// (task 0 on another node than the one srun talks to, srun --pty, an
// older agent), srun keeps nothing, as before.

// maxUnackedInput bounds the input srun keeps unacknowledged: past it,
// srun reads no more until task 0 takes some (as a pipe would).
const maxUnackedInput = 1 << 20

// stdinAcked is the StepStdin count among counts.
func stdinAcked(counts []api.StepCount) (int64, bool) {
	for _, c := range counts {
		if c.Kind == api.StepStdin {
			return c.Bytes, true
		}
	}
	return 0, false
}

// pumpStdin passes r to task 0 and then its end.
func (s *session) pumpStdin(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && s.sendInput(buf[:n]) != nil {
			return
		}
		if err != nil {
			_ = s.sendInput(nil)
			return
		}
	}
}

// sendInput sends b to task 0 (nil: the input's end). It waits while
// srun follows the step again and while maxUnackedInput bytes wait for
// their acknowledgement; kept input that a broken connection did not
// take is sent again once srun follows the step again.
func (s *session) sendInput(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for (s.down || s.inAcks && len(s.inBuf) >= maxUnackedInput) && !s.over {
		s.cond.Wait()
	}
	if s.over {
		return errSessionOver
	}
	m := api.StepMsg{Kind: api.StepStdin, Data: slices.Clone(b)}
	if !s.inAcks {
		return s.enc.Encode(m)
	}
	if b == nil {
		s.inEOF = true
	}
	s.inBuf = append(s.inBuf, b...)
	_ = s.enc.Encode(m) // a broken connection: sent again (resendInput)
	return nil
}

// ackInput drops the input task 0 has (n bytes from the start).
func (s *session) ackInput(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ackLocked(n)
}

func (s *session) ackLocked(n int64) {
	if d := min(n-s.inBase, int64(len(s.inBuf))); d > 0 {
		s.inBuf = append([]byte(nil), s.inBuf[d:]...)
		s.inBase += d
		s.cond.Broadcast()
	}
}

// resendInput sends the kept input again from the count of a restarted
// agent's StepStarted (counts), called with s.mu held once the new
// connection is s.enc. An agent that gives no count acknowledges nothing
// from now on.
func (s *session) resendInput(counts []api.StepCount) {
	if !s.inAcks {
		return
	}
	n, ok := stdinAcked(counts)
	if !ok {
		s.inAcks, s.inBuf = false, nil
		return
	}
	s.ackLocked(n)
	for b := s.inBuf; len(b) > 0; {
		k := min(len(b), 32<<10)
		_ = s.enc.Encode(api.StepMsg{Kind: api.StepStdin, Data: b[:k]})
		b = b[k:]
	}
	if s.inEOF {
		_ = s.enc.Encode(api.StepMsg{Kind: api.StepStdin})
	}
}
