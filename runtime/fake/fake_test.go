package fake

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/gpud/gpud/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func newFake() *Runtime {
	r := New()
	r.SetClock(func() time.Time { return t0 })
	return r
}

// waitExit waits for id with a deadline so a broken fake fails, not hangs.
func waitExit(t *testing.T, r *Runtime, id string) runtime.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.Wait(ctx, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return st
}

func TestSignals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   Script
		signals  []syscall.Signal
		wantExit *runtime.ExitStatus // nil: still running
	}{
		{"sigterm ends a plain task", Script{}, []syscall.Signal{syscall.SIGTERM},
			&runtime.ExitStatus{Code: 143, Signal: syscall.SIGTERM, ExitedAt: t0}},
		{"sigusr1 is only recorded", Script{}, []syscall.Signal{syscall.SIGUSR1}, nil},
		{"ignored sigterm, then sigkill", Script{IgnoreSIGTERM: true}, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL},
			&runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL, ExitedAt: t0}},
		{"ignored sigterm alone", Script{IgnoreSIGTERM: true}, []syscall.Signal{syscall.SIGTERM}, nil},
		{"hang survives sigkill", Script{HangOnStop: true}, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newFake()
			r.SetScript("c1", tc.script)
			ctx := context.Background()
			if err := r.Start(ctx, runtime.TaskConfig{ID: "c1"}); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.signals {
				if err := r.Signal(ctx, "c1", s); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.signals, r.Signals("c1")); diff != "" {
				t.Errorf("Signals (-want +got):\n%s", diff)
			}
			st, _ := r.Status("c1")
			if tc.wantExit == nil {
				if st != runtime.StatusRunning {
					t.Fatalf("status = %s, want running", st)
				}
				return
			}
			if diff := cmp.Diff(*tc.wantExit, waitExit(t, r, "c1")); diff != "" {
				t.Errorf("exit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStartErrorsAndExist(t *testing.T) {
	t.Parallel()
	r := newFake()
	ctx := context.Background()
	imgErr := errors.New("image \"nope\" not found")
	r.SetScript("bad", Script{StartErr: imgErr})
	if err := r.Start(ctx, runtime.TaskConfig{ID: "bad"}); !errors.Is(err, imgErr) {
		t.Fatalf("Start(bad) = %v, want %v", err, imgErr)
	}
	if _, ok := r.Status("bad"); ok {
		t.Error("failed start left a container behind")
	}
	if got := r.StartErrors(); got != 1 {
		t.Errorf("StartErrors = %d, want 1", got)
	}
	if err := r.Start(ctx, runtime.TaskConfig{ID: "ok"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, runtime.TaskConfig{ID: "ok"}); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second Start(ok) = %v, want os.ErrExist", err)
	}
	if got := len(r.Starts()); got != 1 {
		t.Errorf("Starts = %d, want 1", got)
	}
}

func TestWaitListDelete(t *testing.T) {
	t.Parallel()
	r := newFake()
	ctx := context.Background()
	labels := map[string]string{"gpud.node": "n1"}
	r.SetScript("oom", Script{ExitAtOnce: true, Exit: runtime.ExitStatus{Code: 137, OOMKilled: true}})
	if err := r.Start(ctx, runtime.TaskConfig{ID: "oom", Labels: labels}); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, runtime.TaskConfig{ID: "run", Labels: labels}); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(runtime.TaskConfig{ID: "old"}, runtime.StatusExited, runtime.ExitStatus{Code: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(ctx, "missing"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Wait(missing) = %v, want ErrNotFound", err)
	}
	if err := r.Signal(ctx, "missing", syscall.SIGTERM); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Signal(missing) = %v, want ErrNotFound", err)
	}
	// Wait on a running task honours ctx.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Wait(cctx, "run"); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(run, cancelled) = %v, want context.Canceled", err)
	}

	got, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.TaskInfo{
		{ID: "old", Status: runtime.StatusExited, Exit: &runtime.ExitStatus{Code: 7, ExitedAt: t0}},
		{ID: "oom", Labels: labels, Status: runtime.StatusExited, Exit: &runtime.ExitStatus{Code: 137, OOMKilled: true, ExitedAt: t0}},
		{ID: "run", Labels: labels, Status: runtime.StatusRunning},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(runtime.ExitStatus{Code: 7, ExitedAt: t0}, waitExit(t, r, "old")); diff != "" {
		t.Errorf("Wait(old) (-want +got):\n%s", diff)
	}

	// Delete kills a running task first; a waiter sees the kill.
	for _, id := range []string{"run", "oom", "old", "missing"} {
		if err := r.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
	}
	if diff := cmp.Diff([]syscall.Signal{syscall.SIGKILL}, r.Signals("run")); diff != "" {
		t.Errorf("Signals(run) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"run", "oom", "old"}, r.Deletes()); diff != "" {
		t.Errorf("Deletes (-want +got):\n%s", diff)
	}
	if got, _ := r.List(ctx); len(got) != 0 {
		t.Errorf("List after deletes = %v, want none", got)
	}
}

func TestHangOnStop(t *testing.T) {
	t.Parallel()
	r := newFake()
	ctx := context.Background()
	r.SetScript("h", Script{HangOnStop: true, Exit: runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL}})
	if err := r.Start(ctx, runtime.TaskConfig{ID: "h"}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Delete(cctx, "h"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete of a hung task = %v, want context.Canceled", err)
	}
	if st, _ := r.Status("h"); st != runtime.StatusRunning {
		t.Fatalf("status = %s, want running", st)
	}
	// Releasing it lets a pending Delete finish.
	ch := r.Changed()
	errc := make(chan error, 1)
	go func() { errc <- r.Delete(ctx, "h") }()
	<-ch // Delete's kill attempt was recorded
	if !r.Exit("h", runtime.ExitStatus{}) {
		t.Fatal("Exit(h) = false, want true")
	}
	if err := <-errc; err != nil {
		t.Fatalf("Delete after release: %v", err)
	}
	if r.Exit("h", runtime.ExitStatus{}) {
		t.Error("Exit of a deleted task = true")
	}
}

func TestConfigIsCopied(t *testing.T) {
	t.Parallel()
	r := newFake()
	cfg := runtime.TaskConfig{ID: "c", Env: []string{"A=1"}, Labels: map[string]string{"k": "v"}}
	if err := r.Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Env[0] = "A=2"
	cfg.Labels["k"] = "w"
	got, ok := r.Config("c")
	if !ok {
		t.Fatal("Config(c) missing")
	}
	want := runtime.TaskConfig{ID: "c", Env: []string{"A=1"}, Labels: map[string]string{"k": "v"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Config (-want +got):\n%s", diff)
	}
}
