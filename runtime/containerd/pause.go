package containerd

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	return retryFreezer(ctx, func() error {
		_, err := r.client.TaskService().Pause(ctx, &tasks.PauseTaskRequest{ContainerID: id})
		return pauseErr("pause", id, err)
	})
}

// Resume thaws a task Pause froze; resuming a running task is not an
// error.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	ctx = r.nsCtx(ctx)
	return retryFreezer(ctx, func() error {
		_, err := r.client.TaskService().Resume(ctx, &tasks.ResumeTaskRequest{ContainerID: id})
		return pauseErr("resume", id, err)
	})
}

// freezerTries bounds retryFreezer: 5 tries, 100 to 800 ms apart
// (1.5 s of waiting in all).
const freezerTries = 5

// retryFreezer runs op again after a failure other than a missing task.
// runc gives up on a cgroup v1 freezer that does not reach FROZEN while
// the job's processes fork ("unable to freeze"), and thaws it back; a
// try moments later succeeds. Left to the node's next assignments answer,
// the retry came up to a long poll later (TestScontrolSuspendResume
// failed so in CI's run, its job forking a sleep every 0.2 s).
func retryFreezer(ctx context.Context, op func() error) error {
	wait := 100 * time.Millisecond
	for i := 0; ; i++ {
		err := op()
		if err == nil || errors.Is(err, runtime.ErrNotFound) || i == freezerTries-1 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
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
