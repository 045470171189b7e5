package containerd

import (
	"context"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/runtime"
)

var _ runtime.DirChecker = (*Runtime)(nil)

// ContainerDir resolves path inside the root of container id's running
// task (/proc/PID/root) with RESOLVE_IN_ROOT: symlinks, absolute ones
// included, resolve as they would in the container, and nothing leads
// out of it. Only a directory passes.
func (r *Runtime) ContainerDir(ctx context.Context, id, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("check %q in %s: %w", path, id, unix.EINVAL)
	}
	ctx = r.nsCtx(ctx)
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return fmt.Errorf("check %s in %s: %w", path, id, err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return fmt.Errorf("check %s in %s: the container has no running task: %w", path, id, err)
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", task.Pid()), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		// %v: a task gone meanwhile (ENOENT here) says nothing of path.
		return fmt.Errorf("check %s in %s: open its root: %v", path, id, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("check %s in %s: %w", path, id, err)
	}
	unix.Close(fd)
	return nil
}
