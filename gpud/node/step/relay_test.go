package step

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// recSink collects a relay's output.
type recSink struct {
	mu  sync.Mutex
	got []heldOutput
}

func (s *recSink) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, heldOutput{kind, task, bytes.Clone(p)})
}

// TestRelayHoldsThenPasses: a re-adopted step's output is held, in
// order, until srun reattaches; past maxHeldOutput the writer waits (the
// task's output stays in its FIFO) instead of anything being dropped.
func TestRelayHoldsThenPasses(t *testing.T) {
	s := newRelay()
	s.output(api.StepStdout, 0, []byte("a"))
	s.output(api.StepStderr, 1, []byte("b"))
	big := make([]byte, maxHeldOutput)
	s.output(api.StepStdout, 0, big) // fills the relay
	blocked := make(chan struct{})
	go func() {
		s.output(api.StepStdout, 0, []byte("after"))
		close(blocked)
	}()
	select {
	case <-blocked:
		t.Fatal("the relay took output past maxHeldOutput before srun reattached")
	case <-time.After(100 * time.Millisecond):
	}
	var sink recSink
	s.attach(&sink, false)
	<-blocked
	s.output(api.StepStdout, 2, []byte("live"))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var order []string
	for _, h := range sink.got {
		if len(h.data) < 10 {
			order = append(order, h.kind+":"+string(h.data))
		}
	}
	if want := []string{"out:a", "err:b", "out:after", "out:live"}; !slices.Equal(order, want) || len(sink.got) != 5 {
		t.Errorf("relayed %q (%d frames), want %q and the big frame", order, len(sink.got), want)
	}
}

// TestRelayClose: a step no srun came back for drops its output and
// never blocks its tasks' writers.
func TestRelayClose(t *testing.T) {
	s := newRelay()
	s.output(api.StepStdout, 0, make([]byte, maxHeldOutput))
	done := make(chan struct{})
	go func() { s.output(api.StepStdout, 0, []byte("x")); close(done) }()
	time.Sleep(50 * time.Millisecond)
	s.close()
	<-done
	var sink recSink
	s.attach(&sink, false)
	if len(sink.got) != 0 {
		t.Errorf("a closed relay passed on %d frames", len(sink.got))
	}
}

func (s *recSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, h := range s.got {
		b.Write(h.data)
	}
	return b.String()
}

// TestRelayAcked: with a consumer that acknowledges (the agent serving
// a step, following a peer's part), output stays held until acknowledged,
// a detached relay sends the next consumer exactly what was not
// acknowledged (a partly acknowledged write from its first unacknowledged
// byte), and a full relay makes writers wait until acknowledgements free
// room.
func TestRelayAcked(t *testing.T) {
	s := newRelay()
	var first recSink
	s.attach(&first, true)
	s.output(api.StepStdout, 0, []byte("one\n"))
	s.output(api.StepStdout, 0, []byte("two\n"))
	s.output(api.StepStderr, 1, []byte("three\n"))
	if got := first.text(); got != "one\ntwo\nthree\n" {
		t.Fatalf("passed on %q, want every write at once", got)
	}
	s.ack(6) // "one\n" and "tw"
	s.detach()
	s.output(api.StepStdout, 0, []byte("four\n")) // while away
	var second recSink
	s.attach(&second, true)
	if got := second.text(); got != "o\nthree\nfour\n" {
		t.Fatalf("the next consumer got %q, want what was not acknowledged: %q", got, "o\nthree\nfour\n")
	}
	s.ack(int64(len("o\nthree\nfour\n")))
	if s.size != 0 || len(s.held) != 0 {
		t.Fatalf("after every byte was acknowledged the relay holds %d bytes", s.size)
	}

	// Full: a writer waits for an acknowledgement.
	s.output(api.StepStdout, 0, make([]byte, maxHeldOutput))
	blocked := make(chan struct{})
	go func() { s.output(api.StepStdout, 0, []byte("x")); close(blocked) }()
	select {
	case <-blocked:
		t.Fatal("a full acked relay took more output before an acknowledgement")
	case <-time.After(50 * time.Millisecond):
	}
	s.ack(int64(len("o\nthree\nfour\n")) + maxHeldOutput)
	<-blocked
}
