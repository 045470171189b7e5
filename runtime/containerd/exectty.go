package containerd

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpud/gpud/runtime"
)

// Terminals and reattaching for step tasks (runtime.Resizer,
// runtime.ExecAttacher).
//
// A process exec'd on a terminal gets a pseudo-terminal from runc
// through the shim, which copies it to the process's stdout FIFO; its
// size is set at the start (ConsoleSize) and by Resize.
//
// An exec'd process lives under its container's shim, not under the
// caller: when the node agent dies, the process runs on, the shim keeps
// its output in the FIFOs (and, once they are full, the process waits on
// its writes) and holds its own end of the stdin FIFO, so the process
// sees no end of input. The FIFOs stay where cio made them until the
// process is deleted, so a restarted agent attaches to them again
// (LoadProcess with cio.NewAttach) and waits for the exit, which the
// shim keeps until the process is deleted.

// consoleSize is the OCI console size of cfg's terminal, nil without one.
func consoleSize(cfg runtime.ExecConfig) *specs.Box {
	if !cfg.Terminal || cfg.Rows == 0 || cfg.Cols == 0 {
		return nil
	}
	return &specs.Box{Height: uint(cfg.Rows), Width: uint(cfg.Cols)}
}

// Resize sets the size of the process's terminal.
func (e *execProc) Resize(ctx context.Context, rows, cols uint16) error {
	if err := e.proc.Resize(e.r.nsCtx(ctx), uint32(cols), uint32(rows)); err != nil {
		return fmt.Errorf("resize the terminal of process %s: %w", e.proc.ID(), err)
	}
	return nil
}

// AttachExec finds the process execID of container id again (after the
// caller restarted) and copies its further output to cfg.Stdout and
// cfg.Stderr and cfg.Stdin, when set, to its input.
func (r *Runtime) AttachExec(ctx context.Context, id, execID string, cfg runtime.ExecConfig) (runtime.Process, error) {
	ctx = r.nsCtx(ctx)
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("attach to %s in %s: %w", execID, id, runtime.ErrNotFound)
		}
		return nil, fmt.Errorf("attach to %s in %s: %w", execID, id, err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("attach to %s in %s: the container has no task: %w", execID, id, runtime.ErrNotFound)
		}
		return nil, fmt.Errorf("attach to %s in %s: %w", execID, id, err)
	}
	var stdin io.Reader
	var stdinDone chan struct{}
	if cfg.Stdin != nil {
		stdinDone = make(chan struct{})
		stdin = eofReader{cfg.Stdin, stdinDone}
	}
	// cio.NewAttach leaves out the streams given as nil.
	proc, err := task.LoadProcess(ctx, execID, cio.NewAttach(cio.WithStreams(stdin, cfg.Stdout, cfg.Stderr)))
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("attach to %s in %s: %w", execID, id, runtime.ErrNotFound)
		}
		return nil, fmt.Errorf("attach to %s in %s: %w", execID, id, err)
	}
	statusC, err := proc.Wait(context.WithoutCancel(ctx))
	if err != nil {
		if io := proc.IO(); io != nil {
			io.Cancel()
			_ = io.Close()
		}
		return nil, fmt.Errorf("attach to %s in %s: wait: %w", execID, id, err)
	}
	var keep *keeper
	if st, err := proc.Status(ctx); err == nil && st.Status == client.Created {
		// The caller died between creating the process and starting
		// it: it never ran, so it is started now, once (a step's task
		// whose start a restarted agent re-adopts).
		if err := proc.Start(ctx); err != nil {
			if io := proc.IO(); io != nil {
				io.Cancel()
				_ = io.Close()
			}
			_, _ = proc.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
			return nil, fmt.Errorf("start %s in %s, created before the caller restarted: %w", execID, id, err)
		}
		if keep, err = startKeeper(proc.IO().Config(), task.Pid()); err != nil {
			slog.Warn("keep an exec's output beyond the node agent; output written while the agent is away may be lost", "exec", execID, "err", err)
		}
	} else if pio := proc.IO(); pio != nil {
		c := pio.Config()
		keep = findKeeper(cmp.Or(c.Stdout, c.Stderr))
	}
	if stdinDone != nil {
		go func() {
			<-stdinDone
			_ = proc.CloseIO(context.WithoutCancel(ctx), client.WithStdinCloser)
		}()
	}
	return &execProc{r: r, proc: proc, statusC: statusC, attached: true, keep: keep}, nil
}

// attachedIOWait bounds the wait for an attached process's output after
// its exit. An exec's FIFOs lose their writer (the shim) when the process
// ends; a reader that attaches after that finds no writer and would wait
// for one forever, and what the shim had written into them was freed with
// the last open end.
const attachedIOWait = time.Second

// waitAttachedIO waits for the output copy of an attached process to end,
// cancelling it after attachedIOWait (its FIFOs never had a writer).
func waitAttachedIO(pio cio.IO) {
	done := make(chan struct{})
	go func() { pio.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(attachedIOWait):
	}
	pio.Cancel()
	select {
	case <-done:
	case <-time.After(attachedIOWait):
	}
}

var (
	_ runtime.Resizer      = (*execProc)(nil)
	_ runtime.ExecAttacher = (*Runtime)(nil)
)
