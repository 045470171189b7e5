package e2etest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
)

// As runs bin/<name> (or an absolute path) as u in u's work dir, against
// env (GPUD_CONTROLLER and friends).
func (c *Cluster) As(u LocalUser, env []string, name string, args ...string) Result {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := name
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(BinDir, name)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = u.Home
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + u.Home, api.EnvController + "=" + c.Addr}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	return RunCommand(c.T, cmd, fmt.Sprintf("%s %v as %s", name, args, u.Name))
}

// ContainersOf counts containers labelled with the job id, across nodes.
func (c *Cluster) ContainersOf(id string) int {
	c.T.Helper()
	return CountContainers(c.T, c.Dir, id)
}

// CountContainers counts containers labelled with job id in the
// standalone's private containerd.
func CountContainers(t testing.TB, stateDir, id string) int {
	t.Helper()
	n := 0
	for _, task := range ListContainers(t, stateDir) {
		if task.Labels["gpud.job"] == id {
			n++
		}
	}
	return n
}

// ListContainers lists the containers gpud made (with their labels) in
// the private containerd of the standalone whose state directory is
// stateDir.
func ListContainers(t testing.TB, stateDir string) []runtime.TaskInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(stateDir, "containerd"))})
	if err != nil {
		t.Fatalf("connect to the Cluster's containerd: %v", err)
	}
	defer rt.Close()
	tasks, err := rt.List(ctx)
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	return tasks
}
