package step

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// testPart is a step part whose tasks the test ends; signals and terminal
// sizes sent to it are recorded.
type testPart struct {
	*part
	mu      sync.Mutex
	signals []syscall.Signal
	sizes   [][2]int
}

func newTestPart(tasks int) *testPart {
	p := &testPart{part: newPart(tasks)}
	p.remote = func(sig syscall.Signal) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.signals = append(p.signals, sig)
	}
	p.remoteResize = func(rows, cols int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.sizes = append(p.sizes, [2]int{rows, cols})
	}
	return p
}

func (p *testPart) got() ([]syscall.Signal, [][2]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.signals), slices.Clone(p.sizes)
}

// eventually polls cond for a few seconds (followStep's goroutines act
// on messages asynchronously).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

type followed struct {
	worst, sig int
	frames     []api.StepMsg
}

func runFollow(msgs chan api.StepMsg, parts []*testPart, stdin *io.PipeWriter, killOnBadExit bool) <-chan followed {
	var buf bytes.Buffer
	out := newStream(&buf)
	sp := make([]*part, len(parts))
	for i, p := range parts {
		sp[i] = p.part
	}
	done := make(chan followed, 1)
	go func() {
		w, s := follow(context.Background(), msgs, sp, stdin, killOnBadExit, out)
		var f followed
		f.worst, f.sig = w, s
		r := bufio.NewReader(&buf)
		for {
			m, err := api.ReadStepFrame(r)
			if err != nil {
				break
			}
			f.frames = append(f.frames, m)
		}
		done <- f
	}()
	return done
}

// The step message loop that a started step and a re-adopted one share:
// srun's signals and sizes reach every part, its stdin task 0's input
// (an empty message closing it), the tasks' exits reach srun, and the
// worst code and first signal come back; srun going away after the end
// kills nothing.
func TestFollowCarriesMessages(t *testing.T) {
	a, b := newTestPart(1), newTestPart(1)
	msgs := make(chan api.StepMsg, 8)
	stdinR, stdinW := io.Pipe()
	done := runFollow(msgs, []*testPart{a, b}, stdinW, false)

	msgs <- api.StepMsg{Kind: api.StepSignal, Signal: int(syscall.SIGUSR1)}
	msgs <- api.StepMsg{Kind: api.StepSignal, Signal: 99} // not a signal: ignored
	msgs <- api.StepMsg{Kind: api.StepResize, Rows: 40, Cols: 100}
	msgs <- api.StepMsg{Kind: api.StepStdin, Data: []byte("hello\n")}
	msgs <- api.StepMsg{Kind: api.StepStdin} // end of input
	readC := make(chan string, 1)
	go func() { in, _ := io.ReadAll(stdinR); readC <- string(in) }()
	select {
	case in := <-readC:
		if in != "hello\n" {
			t.Fatalf("task 0 read %q, want hello", in)
		}
	case <-time.After(5 * time.Second):
		stdinR.Close()
		t.Fatal("task 0's input not closed by the empty stdin message")
	}
	for _, p := range []*testPart{a, b} {
		eventually(t, "signal and size", func() bool {
			sigs, sizes := p.got()
			return slices.Equal(sigs, []syscall.Signal{syscall.SIGUSR1}) && len(sizes) == 1 && sizes[0] == [2]int{40, 100}
		})
	}
	a.exits <- api.StepMsg{Kind: api.StepExit, Task: 0, Code: 3}
	close(a.exits)
	b.exits <- api.StepMsg{Kind: api.StepExit, Task: 1, Signal: int(syscall.SIGTERM), Code: 143}
	close(b.exits)
	f := <-done
	if f.worst != 143 || f.sig != int(syscall.SIGTERM) {
		t.Errorf("worst %d, signal %d; want 143, SIGTERM", f.worst, f.sig)
	}
	if len(f.frames) != 2 || f.frames[0].Kind != api.StepExit || f.frames[1].Kind != api.StepExit {
		t.Errorf("frames to srun %+v, want the two exits", f.frames)
	}
	close(msgs) // srun goes after the end: nothing is killed
	time.Sleep(10 * time.Millisecond)
	for _, p := range []*testPart{a, b} {
		if sigs, _ := p.got(); slices.Contains(sigs, syscall.SIGKILL) {
			t.Errorf("srun leaving after the step ended killed its tasks: %v", sigs)
		}
	}
}

// srun going away while the step runs kills every task; with
// --kill-on-bad-exit a task's non-zero exit kills the others; stdin
// messages without a stdin are dropped.
func TestFollowKills(t *testing.T) {
	a, b := newTestPart(1), newTestPart(1)
	msgs := make(chan api.StepMsg, 8)
	done := runFollow(msgs, []*testPart{a, b}, nil, false)
	msgs <- api.StepMsg{Kind: api.StepStdin, Data: []byte("dropped")}
	close(msgs)
	for _, p := range []*testPart{a, b} {
		eventually(t, "SIGKILL when srun went", func() bool {
			sigs, _ := p.got()
			return slices.Equal(sigs, []syscall.Signal{syscall.SIGKILL})
		})
		close(p.exits)
	}
	<-done

	a, b = newTestPart(1), newTestPart(1)
	msgs = make(chan api.StepMsg, 8)
	done = runFollow(msgs, []*testPart{a, b}, nil, true)
	a.exits <- api.StepMsg{Kind: api.StepExit, Task: 0, Code: 1}
	close(a.exits)
	eventually(t, "SIGKILL on a bad exit", func() bool {
		sigs, _ := b.got()
		return slices.Equal(sigs, []syscall.Signal{syscall.SIGKILL})
	})
	close(b.exits)
	if f := <-done; f.worst != 1 {
		t.Errorf("worst %d, want 1", f.worst)
	}
	close(msgs)
}
