package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

	"github.com/gpud/gpud/runtime"
)

var _ runtime.Pauser = (*Runtime)(nil)

// Pause freezes the task's cgroup (the cgroup freezer, through the
// shim): every process of the container stops, exec'd step tasks too.
// Pausing a paused task is not an error.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	ctx = r.nsCtx(ctx)
	_, err := r.client.TaskService().Pause(ctx, &tasks.PauseTaskRequest{ContainerID: id})
	return pauseErr("pause", id, err)
}

// Resume thaws a task Pause froze; resuming a running task is not an
// error.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	ctx = r.nsCtx(ctx)
	_, err := r.client.TaskService().Resume(ctx, &tasks.ResumeTaskRequest{ContainerID: id})
	return pauseErr("resume", id, err)
}

func pauseErr(what, id string, err error) error {
	if err == nil {
		return nil
	}
	err = errgrpc.ToNative(err)
	switch {
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%s task %s: %w", what, id, runtime.ErrNotFound)
	case errdefs.IsFailedPrecondition(err), errdefs.IsAlreadyExists(err):
		// runc: already paused, or not paused.
		return nil
	}
	return fmt.Errorf("%s task %s: %w", what, id, err)
}
