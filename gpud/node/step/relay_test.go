package step

import (
	"bytes"
	"slices"
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
	s.attach(&sink)
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
	s.attach(&sink)
	if len(sink.got) != 0 {
		t.Errorf("a closed relay passed on %d frames", len(sink.got))
	}
}
