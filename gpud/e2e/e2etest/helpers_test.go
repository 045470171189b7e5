package e2etest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillStrayShimsEndsTheirContainers: a stray shim that still has a
// container process (a child) is ended with that process, not leaving it
// behind with init as its parent. The shim here is a shell copied under a
// containerd-shim name, started with the cluster's state directory in its
// command line as containerd starts shims; its child stands for the
// container's init.
func TestKillStrayShimsEndsTheirContainers(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	shim := filepath.Join(dir, "containerd-shim-runc-v2")
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Skipf("SKIP (loud): /bin/sh: %v", err)
	}
	if err := os.WriteFile(shim, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "child")
	// The shim starts its "container" and waits; the address argument
	// names the state directory, as a real shim's -address does.
	cmd := exec.Command(shim, "-c", `sleep 600 & echo $! > "$1"; wait`, "shim", pidFile, "-address", state+"/containerd.sock")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }()
	var child int
	WaitFor(t, 10*time.Second, "the fake shim's child", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 0
	})
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	// The pid is written as soon as the child is forked; until it has
	// run sleep it is a copy of the shim, command line and all, and
	// ShimProcs counts two shims (a full run's flake).
	WaitFor(t, 10*time.Second, "the fake shim's child to run sleep", func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(child), "cmdline"))
		return err == nil && strings.HasPrefix(string(b), "sleep\x00")
	})
	if len(ShimProcs(state)) != 1 {
		t.Fatalf("ShimProcs(%s) = %v; want the fake shim", state, ShimProcs(state))
	}

	KillStrayShims(t, state)
	<-reaped
	// The child is not ours to reap: once its parent is gone init reaps
	// it, so it is gone from /proc (or a zombie of init's for a moment).
	WaitFor(t, 10*time.Second, "the stray shim's container process to end", func() bool {
		f := statFields(child)
		return len(f) == 0 || f[0] == "Z"
	})
}
