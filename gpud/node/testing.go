package node

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// TestAgent starts an agent for a test, talking to client and running jobs
// through rt, and stops it (waiting for Run to return) in t.Cleanup. The
// default Config names the node "node-1", keeps state in t.TempDir(), has
// 8 CPUs, 16 GiB and no GPUs, no NUMA topology (so no cpusets), a 1s kill
// grace and a 5s poll wait; cfgFn
// may change any of it. Logs go to t.Log. Extra options (a fake clock)
// may follow.
func TestAgent(t testing.TB, cfgFn func(*Config), client ControllerClient, rt runtime.Runtime, opts ...Option) *Agent {
	t.Helper()
	a, _ := startTestAgent(t, cfgFn, client, rt, opts...)
	return a
}

// startTestAgent is TestAgent that also returns an idempotent stop, for
// tests that restart the agent.
func startTestAgent(t testing.TB, cfgFn func(*Config), client ControllerClient, rt runtime.Runtime, opts ...Option) (*Agent, func()) {
	t.Helper()
	cfg := Config{
		Name:              "node-1",
		StateDir:          t.TempDir(),
		Inventory:         spec.Inventory{CPUs: 8, MemMiB: 16 << 10},
		KillGrace:         time.Second,
		HeartbeatInterval: time.Second,
		PollWait:          5 * time.Second,
		Hostname:          "node-1.test",
		Version:           "test",
		// No NUMA topology: jobs are not pinned unless a test gives one.
		SysfsRoot: t.TempDir(),
	}
	if cfgFn != nil {
		cfgFn(&cfg)
	}
	opts = append([]Option{WithLogger(TestLogger(t)), WithRetryBackoff(10*time.Millisecond, 200*time.Millisecond)}, opts...)
	a, err := New(cfg, client, rt, opts...)
	if err != nil {
		t.Fatalf("node.TestAgent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("node agent %s: %v", cfg.Name, err)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// TestLogger returns a logger that writes to t.Log at debug level.
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
