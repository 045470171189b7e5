package containerd_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// lockedBuf is output the test reads while the exec writes it.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExecOnTerminal: a process exec'd with Terminal runs on a terminal
// of the given size (its stdout and stderr both the terminal's), reads
// its input from it, and Resize changes the size it sees.
func TestExecOnTerminal(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	dir := jobDir(t)
	cfg := hostTask(t, dir, "/bin/sh", "-c", "sleep 60")
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), cfg.ID) })
	inR, inW := io.Pipe()
	var out lockedBuf
	proc, err := rt.Exec(ctx, cfg.ID, runtime.ExecConfig{
		ID: "tty", Args: []string{"/bin/sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo all-tty; stty size; read x; stty size; echo to-stderr >&2; exit 6"},
		Env: []string{"PATH=/usr/bin:/bin"}, Stdin: inR, Stdout: &out, Terminal: true, Rows: 24, Cols: 80,
	})
	if err != nil {
		t.Fatalf("Exec on a terminal: %v", err)
	}
	waitOut := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("terminal output %q lacks %q", out.String(), want)
			}
		}
	}
	waitOut("24 80\r\n")
	rz, ok := proc.(runtime.Resizer)
	if !ok {
		t.Fatal("a process on a terminal is not a runtime.Resizer")
	}
	if err := rz.Resize(ctx, 30, 100); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	if _, err := inW.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := proc.Wait(wctx)
	inW.Close()
	if err != nil || st.Code != 6 {
		t.Fatalf("exit %+v %v, want code 6", st, err)
	}
	_ = proc.Delete(ctx)
	for _, want := range []string{"all-tty\r\n", "30 100\r\n", "to-stderr\r\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("terminal output %q lacks %q", out.String(), want)
		}
	}
}

// TestExecMissingCwd: an exec whose working directory is not in the
// container fails with runtime.ErrNoCwd without taking any of its input,
// so the caller's next try (in /tmp) reads all of it.
func TestExecMissingCwd(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	cfg := hostTask(t, jobDir(t), "/bin/sh", "-c", "sleep 60")
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), cfg.ID) })
	inR, inW := io.Pipe()
	go func() {
		_, _ = inW.Write([]byte("every byte\n"))
		inW.Close()
	}()
	var out lockedBuf
	ec := runtime.ExecConfig{ID: "nocwd", Args: []string{"/bin/sh", "-c", "cat; pwd"}, Env: []string{"PATH=/usr/bin:/bin"},
		Cwd: "/no/such/dir/in/the/container", Stdin: inR, Stdout: &out}
	if _, err := rt.Exec(ctx, cfg.ID, ec); !errors.Is(err, runtime.ErrNoCwd) {
		t.Fatalf("Exec in a missing directory: %v; want runtime.ErrNoCwd", err)
	}
	ec.Cwd = "/"
	proc, err := rt.Exec(ctx, cfg.ID, ec)
	if err != nil {
		t.Fatalf("Exec in /: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if st, err := proc.Wait(wctx); err != nil || st.Code != 0 {
		t.Fatalf("exit %+v %v", st, err)
	}
	_ = proc.Delete(ctx)
	if got := out.String(); got != "every byte\n/\n" {
		t.Errorf("the second try read %q, want all the input and then /", got)
	}
}

// TestAttachExecCreatedNotStarted: the caller died between creating an
// exec and starting it (a node agent killed mid-step-start): attaching to
// it again starts it, once, and its exit is waited for (before, the
// process stayed created and the wait never ended).
func TestAttachExecCreatedNotStarted(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	cfg := hostTask(t, jobDir(t), "/bin/sh", "-c", "sleep 60")
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), cfg.ID) })
	cl, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cctx := namespaces.WithNamespace(ctx, containerd.DefaultNamespace)
	ctr, err := cl.LoadContainer(cctx, cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.Task(cctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ctr.Spec(cctx)
	if err != nil {
		t.Fatal(err)
	}
	p := *sp.Process
	p.Args = []string{"/bin/sh", "-c", "exit 7"}
	if _, err := task.Exec(cctx, "created", &p, cio.NullIO); err != nil {
		t.Fatalf("create the exec: %v", err)
	}
	proc, err := rt.AttachExec(ctx, cfg.ID, "created", runtime.ExecConfig{})
	if err != nil {
		t.Fatalf("AttachExec of a created process: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if st, err := proc.Wait(wctx); err != nil || st.Code != 7 {
		t.Fatalf("exit %+v %v; want the process started and its code 7", st, err)
	}
	_ = proc.Delete(ctx)
}

// TestAttachExecNeverCreated: attaching to an exec the caller died before
// creating answers runtime.ErrNotFound (a restarted node agent then
// starts the step's task, which never ran), not an unclassified error.
func TestAttachExecNeverCreated(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	cfg := hostTask(t, jobDir(t), "/bin/sh", "-c", "sleep 60")
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), cfg.ID) })
	_, err := rt.AttachExec(ctx, cfg.ID, "never-created", runtime.ExecConfig{})
	if !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("AttachExec of an exec never created: %v; want runtime.ErrNotFound", err)
	}
}
