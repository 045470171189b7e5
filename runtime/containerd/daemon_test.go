package containerd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// helperDirEnv makes the test binary act as a short-lived "agent" that
// starts a daemon in the named dir, prints its address, and waits to be
// killed.
const helperDirEnv = "GPUD_TEST_DAEMON_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		d, err := containerd.StartDaemon(context.Background(), containerd.DaemonOptions{Dir: dir})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("ADDRESS", d.Address())
		select {} // until kill -9
	}
	// The Daemon's waiter and log tailer and every gRPC connection must be
	// gone once the tests have cleaned up.
	goleak.VerifyTestMain(m)
}

func TestDaemonOutlivesKilledParentAndIsReused(t *testing.T) {
	t.Parallel()
	containerdtest.Require(t)
	dir, err := os.MkdirTemp("", "ctdk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperDirEnv+"="+dir)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDRESS ") {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper said %q (%v), want ADDRESS", line, err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "ADDRESS "))
	if err := helper.Process.Kill(); err != nil { // kill -9 of the "agent"
		t.Fatal(err)
	}
	helper.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := containerd.StartDaemon(ctx, containerd.DaemonOptions{Dir: dir})
	if err != nil {
		t.Fatalf("StartDaemon after the parent died: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.Stop(context.Background())
		}
	})
	if !d.Reused || d.Address() != addr || d.Pid() == 0 {
		t.Fatalf("StartDaemon = {Reused: %v, Address: %s, Pid: %d}, want the surviving daemon at %s reused", d.Reused, d.Address(), d.Pid(), addr)
	}
	rt := newRuntime(t, d.Address())
	if _, err := rt.List(ctx); err != nil {
		t.Fatalf("List on the reused daemon: %v", err)
	}
	pid := d.Pid()
	if err := d.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	// Gone, or a zombie waiting for init to reap it: either way not serving.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), "(containerd)") && !strings.Contains(string(b), ") Z") {
		t.Errorf("containerd pid %d still running after Stop", pid)
	}
	if err := d.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestDaemonLongDirUsesShortSocket(t *testing.T) {
	t.Parallel()
	containerdtest.Require(t)
	base, err := os.MkdirTemp("", "ctdl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
	var log strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := containerd.StartDaemon(ctx, containerd.DaemonOptions{Dir: dir, Log: &syncWriter{b: &log}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(d.Address())) })
	if d.Reused {
		t.Error("fresh dir: Reused = true")
	}
	if len(d.Address()) > 100 || strings.HasPrefix(d.Address(), dir) {
		t.Errorf("Address() = %s (%d bytes), want a short path outside %s", d.Address(), len(d.Address()), dir)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "containerd successfully booted") {
		t.Errorf("Log got %q, want the daemon's log", log.String())
	}
}

// syncWriter is written by the daemon's log tailer and read after Stop,
// which waits for the tailer; it needs no lock beyond that ordering.
type syncWriter struct{ b *strings.Builder }

func (w *syncWriter) Write(p []byte) (int, error) { return w.b.Write(p) }
