package step

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// recSink collects a relay's output.
type recSink struct {
	mu  sync.Mutex
	got []heldOutput
}

func (s *recSink) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, heldOutput{kind: kind, task: task, data: bytes.Clone(p)})
}

// TestRelayHoldsThenPasses: a re-adopted step's output is held, in
// order, until srun reattaches; past maxHeldOutput the writer waits (the
// task's output stays in its FIFO) instead of anything being dropped.
func TestRelayHoldsThenPasses(t *testing.T) {
	s := newRelay(true)
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
	s.attach(&sink, false, nil)
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
	s := newRelay(true)
	s.output(api.StepStdout, 0, make([]byte, maxHeldOutput))
	done := make(chan struct{})
	go func() { s.output(api.StepStdout, 0, []byte("x")); close(done) }()
	time.Sleep(50 * time.Millisecond)
	s.close()
	<-done
	var sink recSink
	s.attach(&sink, false, nil)
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
// a step, following a peer's part), output stays held until acknowledged;
// the next consumer gets exactly what neither it nor the acknowledgements
// say was received (a partly received write from its first byte not
// received); a full relay makes writers wait until acknowledgements free
// room.
func TestRelayAcked(t *testing.T) {
	out0 := func(n int64) api.StepCount { return api.StepCount{Task: 0, Kind: api.StepStdout, Bytes: n} }
	err1 := func(n int64) api.StepCount { return api.StepCount{Task: 1, Kind: api.StepStderr, Bytes: n} }
	s := newRelay(true)
	var first recSink
	s.attach(&first, true, nil)
	s.output(api.StepStdout, 0, []byte("one\n"))
	s.output(api.StepStdout, 0, []byte("two\n"))
	s.output(api.StepStderr, 1, []byte("three\n"))
	if got := first.text(); got != "one\ntwo\nthree\n" {
		t.Fatalf("passed on %q, want every write at once", got)
	}
	s.ack([]api.StepCount{out0(6)}) // "one\n" and "tw"
	s.detach()
	s.output(api.StepStdout, 0, []byte("four\n")) // while away
	// The next consumer got "thr" of task 1's stderr before the old
	// connection broke.
	var second recSink
	s.attach(&second, true, []api.StepCount{out0(6), err1(3)})
	if got, want := second.text(), "o\nee\nfour\n"; got != want {
		t.Fatalf("the next consumer got %q, want what it does not have: %q", got, want)
	}
	s.ack([]api.StepCount{out0(13), err1(6)})
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
	s.ack([]api.StepCount{out0(13 + maxHeldOutput)})
	<-blocked
}

// TestRelayAlignedOnAttach: a re-adopted part's relay counts from what
// the consumer has: a consumer that had 5 bytes gets what the restarted
// agent read as the bytes after them, and its acknowledgements count the
// same way.
func TestRelayAlignedOnAttach(t *testing.T) {
	s := newRelay(false)
	s.output(api.StepStdout, 0, []byte("line 3\n"))
	var sink recSink
	s.attach(&sink, true, []api.StepCount{{Task: 0, Kind: api.StepStdout, Bytes: 14}})
	if got := sink.text(); got != "line 3\n" {
		t.Fatalf("a re-adopted relay sent %q, want everything it read", got)
	}
	s.ack([]api.StepCount{{Task: 0, Kind: api.StepStdout, Bytes: 21}})
	if len(s.held) != 0 {
		t.Errorf("after the consumer acknowledged 21 bytes (14 before, 7 since) the relay still holds %d bytes", s.size)
	}
}

// TestHeldSpoolCompactsAndReadsBack: a kept part's spool (heldspool.go)
// stays bounded while its consumer acknowledges (rewritten with each
// stream's count past heldCompactAt), and a relay read back from it
// after a kill holds exactly what was not acknowledged, counted from the
// tasks' start: a follower with the acknowledged counts gets the rest.
func TestHeldSpoolCompactsAndReadsBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	n, h := testNode("n1")
	asg := &api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{{Node: "n1"}}}}
	al := testAlloc(t, n, h, asg, dir)
	s := newRelay(true)
	if s.sp = newHeldSpool(al, 3); s.sp == nil {
		t.Fatal("no spool")
	}
	var first recSink
	s.attach(&first, true, nil)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var acked int64
	for range 3 * heldCompactAt / len(chunk) {
		s.output(api.StepStdout, 0, chunk)
		acked += int64(len(chunk))
		s.ack([]api.StepCount{{Kind: api.StepStdout, Task: 0, Bytes: acked}})
	}
	fi, err := os.Stat(filepath.Join(dir, heldFile(3)))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("spool %v %v; want a file only root reads", fi, err)
	}
	if fi.Size() > heldCompactAt+2*int64(len(chunk)) {
		t.Errorf("spool is %d bytes after %d acknowledged, want it compacted below %d", fi.Size(), acked, heldCompactAt)
	}
	s.output(api.StepStdout, 0, []byte("tail\n"))
	s.output(api.StepStderr, 1, []byte("err\n"))
	s.ack([]api.StepCount{{Kind: api.StepStdout, Task: 0, Bytes: acked + 2}}) // "ta" arrived

	// kill -9: a new agent reads the spool back.
	r, ok := al.readHeld(3)
	if !ok || !r.aligned {
		t.Fatalf("readHeld: %v aligned %v; want an aligned relay", ok, r != nil && r.aligned)
	}
	if got, want := r.next[streamID{api.StepStdout, 0}], acked+5; got != want {
		t.Errorf("stdout of task 0 counted %d, want %d (from the task's start)", got, want)
	}
	var second recSink
	r.attach(&second, true, []api.StepCount{{Kind: api.StepStdout, Task: 0, Bytes: acked + 2}})
	if got, want := second.text(), "il\nerr\n"; got != want {
		t.Errorf("the follower got %q, want %q (what it lacks, once)", got, want)
	}
	r.output(api.StepStdout, 0, []byte("more\n"))
	if got := r.held[len(r.held)-1].off; got != acked+5 {
		t.Errorf("the next write's offset %d, want %d", got, acked+5)
	}
	s.close()
	r.close()
}
