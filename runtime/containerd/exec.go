package containerd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

	"github.com/gpud/gpud/runtime"
)

// notFound says err is containerd's "not found", as a gRPC status or as
// the client returns it, already made native (a second errgrpc.ToNative
// of that loses its class: an exec that was never created then looked
// like any other failure to a restarted agent).
func notFound(err error) bool {
	return errdefs.IsNotFound(err) || errdefs.IsNotFound(errgrpc.ToNative(err))
}

// Exec starts a process inside the running container id (containerd's
// task Exec, which containerd 1.6 serves too): a step task. It inherits
// the container process's user, groups, capabilities and rlimits; its
// output is copied to cfg.Stdout and cfg.Stderr through FIFOs.
func (r *Runtime) Exec(ctx context.Context, id string, cfg runtime.ExecConfig) (runtime.Process, error) {
	ctx = r.nsCtx(ctx)
	if len(cfg.Args) == 0 {
		return nil, fmt.Errorf("exec in %s: no command given", id)
	}
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("exec in %s: %w", id, runtime.ErrNotFound)
		}
		return nil, fmt.Errorf("exec in %s: %w", id, err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("exec in %s: the container has no running task: %w", id, err)
	}
	spec, err := ctr.Spec(ctx)
	if err != nil || spec.Process == nil {
		return nil, fmt.Errorf("exec in %s: read container spec: %v", id, err)
	}
	p := *spec.Process
	p.Terminal = cfg.Terminal
	p.ConsoleSize = consoleSize(cfg)
	p.Args = cfg.Args
	p.Env = cfg.Env
	if cfg.Cwd != "" {
		p.Cwd = cfg.Cwd
	}
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var stdin io.Reader
	var stdinDone chan struct{}
	// containerd's copy of the input starts reading with the exec's IO,
	// before the process starts: the gate holds it back until the start
	// succeeded, so an exec that fails to start (a caller trying again
	// elsewhere) takes none of the caller's input.
	gate := &startGate{opened: make(chan struct{})}
	defer gate.open(false) // a return before the start: EOF
	if cfg.Stdin != nil {
		// containerd closes the FIFO at EOF but not the process's end:
		// that takes CloseIO once the copy is over (as ctr does).
		stdinDone = make(chan struct{})
		gate.r = cfg.Stdin
		stdin = eofReader{gate, stdinDone}
	}
	ioOpts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr)}
	if cfg.Terminal {
		ioOpts = append(ioOpts, cio.WithTerminal)
	}
	proc, err := task.Exec(ctx, cfg.ID, &p, cio.NewCreator(ioOpts...))
	if err != nil {
		return nil, fmt.Errorf("exec %q in %s: %w", cfg.Args[0], id, err)
	}
	// The status channel must exist before the process starts; it
	// outlives the caller's ctx (the process is waited for later).
	statusC, err := proc.Wait(context.WithoutCancel(ctx))
	if err != nil {
		_, _ = proc.Delete(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("exec %q in %s: %w", cfg.Args[0], id, err)
	}
	if err := proc.Start(ctx); err != nil {
		gate.open(false)
		_, _ = proc.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		if strings.Contains(err.Error(), "chdir to cwd") { // runc's words
			return nil, fmt.Errorf("start %q in %s: %w: %w", cfg.Args[0], id, runtime.ErrNoCwd, err)
		}
		return nil, fmt.Errorf("start %q in %s: %w", cfg.Args[0], id, err)
	}
	gate.open(true)
	// The keeper holds the output FIFOs (execkeep.go). Only after the
	// start: the shim opens its ends then, waiting for a reader, which
	// must be ours; a keeper opened before could stand in for it, and
	// ours might then open only after the shim closed, and wait forever.
	keep, err := startKeeper(proc.IO().Config(), task.Pid())
	if err != nil {
		slog.Warn("keep an exec's output beyond the node agent; output written while the agent is away may be lost", "exec", cfg.ID, "err", err)
	}
	if stdinDone != nil {
		// The caller ends Stdin (EOF) at the latest when the process is
		// waited for; CloseIO on an exited process fails harmlessly.
		go func() {
			<-stdinDone
			_ = proc.CloseIO(context.WithoutCancel(ctx), client.WithStdinCloser)
		}()
	}
	return &execProc{r: r, proc: proc, statusC: statusC, keep: keep}, nil
}

// startGate reads r once opened with true; opened with false (the
// process did not start), it is at EOF without reading r.
type startGate struct {
	r      io.Reader
	once   sync.Once
	ok     bool
	opened chan struct{}
}

func (g *startGate) open(ok bool) {
	g.once.Do(func() {
		g.ok = ok
		close(g.opened)
	})
}

func (g *startGate) Read(p []byte) (int, error) {
	<-g.opened
	if !g.ok {
		return 0, io.EOF
	}
	return g.r.Read(p)
}

// eofReader closes done when its reader is exhausted.
type eofReader struct {
	r    io.Reader
	done chan struct{}
}

func (e eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		select {
		case <-e.done:
		default:
			close(e.done)
		}
	}
	return n, err
}

type execProc struct {
	r       *Runtime
	proc    client.Process
	statusC <-chan client.ExitStatus
	st      *runtime.ExitStatus
	// attached: found again by AttachExec, whose FIFOs may have no
	// writer left (the process ended meanwhile), so the output copy is
	// given a bounded time after the exit (attachedIOWait).
	attached bool
	keep     *keeper // holds the output FIFOs until the output is read
}

func (e *execProc) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	if e.st != nil {
		return *e.st, nil
	}
	select {
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	case s := <-e.statusC:
		code, at, err := s.Result()
		if err != nil {
			return runtime.ExitStatus{}, fmt.Errorf("wait for process %s: %w", e.proc.ID(), err)
		}
		e.keep.stop() // the FIFOs end when the shim closes them
		if io := e.proc.IO(); io != nil {
			if e.attached {
				waitAttachedIO(io)
			} else {
				io.Wait() // all output copied
			}
		}
		st := exitStatus(code, at)
		e.st = &st
		return st, nil
	}
}

func (e *execProc) Signal(ctx context.Context, sig syscall.Signal) error {
	err := e.proc.Kill(e.r.nsCtx(ctx), sig)
	if err != nil && notFound(err) {
		return fmt.Errorf("signal process %s: %w", e.proc.ID(), runtime.ErrNotFound)
	}
	return err
}

func (e *execProc) Delete(ctx context.Context) error {
	_, err := e.proc.Delete(e.r.nsCtx(ctx), client.WithProcessKill)
	if err != nil && notFound(err) {
		return nil
	}
	return err
}
