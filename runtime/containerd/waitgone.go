package containerd

import (
	"context"
	"errors"
	"fmt"
)

// WaitGone blocks until no container of the namespace that match selects
// (by its ID and labels) is left (the containers deleted, not only their tasks ended), or ctx
// ends. It looks again at each container deletion containerd announces
// (it subscribes before the first look, so none is missed).
func (r *Runtime) WaitGone(ctx context.Context, match func(id string, labels map[string]string) bool) error {
	ctx, cancel := context.WithCancel(r.nsCtx(ctx))
	defer cancel()
	evs, errs := r.client.EventService().Subscribe(ctx, `topic=="/containers/delete"`)
	for {
		ctrs, err := r.client.ContainerService().List(ctx)
		if err != nil {
			return fmt.Errorf("list containers in namespace %s: %w", r.ns, err)
		}
		left := 0
		for _, c := range ctrs {
			if match(c.ID, c.Labels) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-evs:
		case err := <-errs:
			if ctx.Err() != nil {
				// The stream ended with ctx: say so as the ctx error,
				// not as containerd's status for it (callers test for
				// the deadline; TestWaitGone failed so at random).
				err = ctx.Err()
			} else if err == nil {
				err = errors.New("event stream ended")
			}
			return fmt.Errorf("wait for %d containers to go: %w", left, err)
		case <-ctx.Done():
			return fmt.Errorf("wait for %d containers to go: %w", left, ctx.Err())
		}
	}
}
