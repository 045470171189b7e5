package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

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
		if filepath.Base(args[0]) != "containerd" || !strings.Contains(string(cmdline), stateDir+"/") { // not another cluster's whose dir starts alike
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
