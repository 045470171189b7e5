package containerd_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

func TestWaitGone(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	a := hostTask(t, jobDir(t), "sleep", "600")
	a.ID += "-a"
	b := hostTask(t, jobDir(t), "sleep", "600")
	b.ID += "-b"
	for _, cfg := range []runtime.TaskConfig{a, b} {
		if err := rt.Start(ctx, cfg); err != nil {
			t.Fatalf("Start %s: %v", cfg.ID, err)
		}
		t.Cleanup(func() { _ = rt.Delete(context.Background(), cfg.ID) })
	}
	isA := func(id string, _ map[string]string) bool { return id == a.ID }
	// A container left, its task running: it waits.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := rt.WaitGone(short, isA)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitGone with %s running = %v, want the deadline", a.ID, err)
	}
	done := make(chan error, 1)
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	go func() { done <- rt.WaitGone(wctx, isA) }()
	// Its task gone, the container still there: it still waits.
	if err := rt.Signal(ctx, a.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, rt, a.ID)
	select {
	case err := <-done:
		t.Fatalf("WaitGone returned %v while %s's container is still there", err, a.ID)
	case <-time.After(300 * time.Millisecond):
	}
	if err := rt.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitGone after the delete = %v, want nil", err)
	}
	// b, which it does not select, is still there.
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("List = %+v, want only %s", list, b.ID)
	}
	if err := rt.WaitGone(wctx, func(string, map[string]string) bool { return false }); err != nil {
		t.Errorf("WaitGone selecting nothing = %v, want nil at once", err)
	}
}
