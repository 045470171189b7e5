package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime/containerd"
)

// countContainers counts containers labelled with job id in the
// standalone's private containerd.
func countContainers(t testing.TB, stateDir, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(stateDir, "containerd"))})
	if err != nil {
		t.Fatalf("connect to the cluster's containerd: %v", err)
	}
	defer rt.Close()
	tasks, err := rt.List(ctx)
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	n := 0
	for _, task := range tasks {
		if task.Labels["gpud.job"] == id {
			n++
		}
	}
	return n
}

// killStrayShims ends shims left by a containerd of this cluster that was
// killed while creating a task: they hold no process, and the restarted
// containerd (which cleans up after them) no longer talks to them.
func killStrayShims(t testing.TB, stateDir string) {
	t.Helper()
	for _, sh := range shimProcs(stateDir) {
		t.Logf("ending stray shim %d: %s", sh.pid, sh.cmdline)
		_ = syscall.Kill(sh.pid, syscall.SIGKILL)
	}
}

// killStrayDaemons kill -9s the containerd that a standalone under
// stateDir started (it runs in its own process group, so killing the
// standalone's group leaves it). Shims are left alone: they hold the jobs.
func killStrayDaemons(t testing.TB, stateDir string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != "containerd" || !strings.Contains(string(cmdline), stateDir) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		t.Logf("kill -9 containerd pid %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
