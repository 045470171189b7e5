package step

import (
	"context"
	"io"
	"sync"
	"syscall"

	"github.com/gpud/gpud/gpud/api"
)

// follow is the step's message loop, for a step this agent started (run)
// and for one it re-adopted after a restart (reattach), and for a peer's
// part (servePart): it carries srun's messages (msgs) to the step's parts
// on every node and their exits to srun (out), until every task exited.
// Signals go to every task, terminal sizes to every part, stdin (when
// stdin is not nil) to task 0, an empty stdin message closing it; srun
// going away (msgs closed) before the step ended kills the tasks, since
// nobody reads their output or exit any more. With killOnBadExit, a task
// that exits non-zero kills the others. It returns the worst exit code
// and the first signal that ended a task.
func follow(ctx context.Context, msgs <-chan api.StepMsg, parts []*part, stdin *io.PipeWriter, killOnBadExit bool,
	out *stream) (worst, worstSig int) {
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // ends with the step
	defer cancel()
	signalAll := func(sig syscall.Signal) {
		for _, p := range parts {
			p.signal(sig)
		}
	}
	stdinC := make(chan []byte, 64)
	if stdin != nil {
		defer stdin.Close() // releases a write blocked on a task that never read
		go func() {
			for {
				select {
				case <-fctx.Done():
					return
				case b := <-stdinC:
					if b == nil {
						stdin.Close()
						continue
					}
					_, _ = stdin.Write(b) // task 0 gone: its input is dropped
				}
			}
		}()
	}
	go func() {
		for {
			m, ok := <-msgs
			if !ok {
				select {
				case <-fctx.Done():
				default:
					signalAll(syscall.SIGKILL)
				}
				return
			}
			switch {
			case m.Kind == api.StepSignal && m.Signal > 0 && m.Signal < 65:
				signalAll(syscall.Signal(m.Signal))
			case m.Kind == api.StepResize:
				for _, p := range parts {
					p.resize(m.Rows, m.Cols)
				}
			case m.Kind == api.StepStdin && stdin != nil:
				var b []byte // nil: the end of the input
				if len(m.Data) > 0 {
					b = m.Data
				}
				// Backpressure once 64 chunks wait for task 0 to read.
				select {
				case stdinC <- b:
				case <-fctx.Done():
				}
			}
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ex := range p.exits {
				out.send(ex)
				mu.Lock()
				worst = max(worst, ex.Code)
				if worstSig == 0 {
					worstSig = ex.Signal
				}
				mu.Unlock()
				if ex.Code != 0 && killOnBadExit {
					signalAll(syscall.SIGKILL)
				}
			}
		}()
	}
	wg.Wait()
	return worst, worstSig
}
