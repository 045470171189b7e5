package srun

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// A step request sent again. srun inside a job talks to its node's agent
// over the job's step socket; when that agent is killed and restarted
// before it answered (the socket refuses, or the connection ends before
// the step started), srun sends the same request again until the agent is
// back (reattachWait). Each request carries a key (api.StepRequest.Key,
// made here): a restarted agent that had started the step for it (it
// records the key with the step before any task runs) follows that step
// instead of starting a second one, so a request sent twice is one step.

// newKey is a step request's key: 128 random bits.
func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dialAgain dials the node agent with redial, again until reattachWait
// has passed while it refuses the connection (the socket is there but its
// agent died and is restarting). Any other error (no such socket, no
// permission) is srun's answer at once.
func dialAgain(redial func() (net.Conn, error), stderr io.Writer, where string) (net.Conn, error) {
	deadline := time.Now().Add(reattachWait)
	said := false
	for {
		c, err := redial()
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return c, err
		}
		if !said {
			said = true
			fmt.Fprintf(stderr, "srun: this job's node agent at %s does not answer (%v); trying again for up to %v\n", where, err, reattachWait)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// resend sends the step request again over a new connection after the
// old one broke before the step started, and returns the new stream; nil
// when the agent did not come back within reattachWait (said why).
func (s *session) resend(cause error) *bufio.Reader {
	s.mu.Lock()
	s.down = true
	old := s.conn
	s.mu.Unlock()
	old.Close()
	if !s.resent {
		s.resent = true
		fmt.Fprintf(s.stderr, "srun: lost the connection to the node agent before the step started (%v); sending the request again for up to %v\n", cause, reattachWait)
	}
	deadline := time.Now().Add(reattachWait)
	for {
		s.mu.Lock()
		quit := s.quit
		s.mu.Unlock()
		if quit {
			break
		}
		if c, err := s.o.redial(); err == nil {
			enc := json.NewEncoder(c)
			if enc.Encode(s.o.req) == nil {
				s.mu.Lock()
				s.conn, s.enc, s.down = c, enc, false
				s.cond.Broadcast()
				s.mu.Unlock()
				return bufio.NewReaderSize(c, 256<<10)
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.stderr, "srun: error: the node agent did not come back within %v\n", reattachWait)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.mu.Lock()
	s.over = true
	s.cond.Broadcast()
	s.mu.Unlock()
	return nil
}
