package app

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func topFixture(t *testing.T) *fakectl.Server {
	t.Helper()
	old := now
	now = func() time.Time { return acctNow }
	t.Cleanup(func() { now = old })
	ctl := fakectl.New(t)
	gpus := func(node string, n int) []spec.GPU {
		var out []spec.GPU
		for i := range n {
			out = append(out, spec.GPU{Index: i, UUID: node + "-" + string(rune('a'+i)), Model: "h100"})
		}
		return out
	}
	ctl.Set(func(s *fakectl.Server) {
		s.Nodes = []spec.Node{
			{Inventory: spec.Inventory{Name: "gpu01", GPUs: gpus("gpu01", 4)}, State: spec.NodeMixed, AllocGPUs: []string{"gpu01-a", "gpu01-b"}},
			{Inventory: spec.Inventory{Name: "gpu02", GPUs: gpus("gpu02", 4)}, State: spec.NodeDown},
			{Inventory: spec.Inventory{Name: "cpu01"}, State: spec.NodeIdle},
		}
		s.Jobs = []spec.Job{
			{ID: 7, User: "alice", JobSpec: spec.JobSpec{Account: "ml", Resources: spec.Resources{GPUsPerNode: 2, GPUModel: "h100"}},
				State: spec.StateRunning, StartTime: spec.NewTime(acctNow.Add(-time.Hour - 2*time.Minute - 3*time.Second)), Nodes: []string{"gpu01"}},
			{ID: 8, User: "bob", JobSpec: spec.JobSpec{Account: "edu", Resources: spec.Resources{GPUsPerNode: 1}},
				State: spec.StatePending, Reason: "Priority"},
		}
		s.Latest = []api.LatestUsage{{Node: "gpu01", JobID: 7, Attempt: 1, GPUs: 2, GPUUtilAvg: 80, GPUUtilMax: 95}}
	})
	return ctl
}

func TestTopOnce(t *testing.T) {
	ctl := topFixture(t)
	got := run(t, ctl, "top", "--once")
	want := "gpuq top - 2025-03-14 15:30:00  nodes 3 (1 down or drained)  GPUs 2/8 allocated, 20% utilised  jobs 1 running, 1 pending\n\n" +
		"NODE   STATE  GPUS(A/T)  GPU UTIL\n" +
		"gpu01  MIXED  h100:2/4   [########------------]  40%\n" + // 2 of 4 GPUs at 80%
		"gpu02  DOWN   h100:0/4   [--------------------]   0%\n" +
		"cpu01  IDLE   0/0        -\n" +
		"\n" +
		"JOBID  USER   ACCOUNT  ST  TIME     GPUS        GPU UTIL           NODELIST(REASON)\n" +
		"7      alice  ml       R   1:02:03  gpu:h100:2  [########--]  80%  gpu01\n" +
		"8      bob    edu      PD  0:00     gpu:1       -                  (Priority)\n"
	if got.code != 0 || got.stdout != want {
		t.Errorf("exit %d stderr %q stdout:\n%s\nwant:\n%s", got.code, got.stderr, got.stdout, want)
	}
	if got := run(t, ctl, "top", "--once", "-n", "1"); !strings.HasSuffix(got.stdout, "... and 1 more jobs\n") {
		t.Errorf("-n 1 = %q; want the rest counted", got.stdout)
	}
}

// syncBuffer is written by the app and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Without --once, top redraws every --interval until q is pressed.
func TestTopRefreshesUntilQ(t *testing.T) {
	ctl := topFixture(t)
	keys, press := io.Pipe()
	var out, errb syncBuffer
	a := New()
	a.Reader, a.Writer, a.ErrWriter = keys, &out, &errb
	done := make(chan int)
	go func() {
		done <- exitcode.Main(context.Background(), a, []string{"gpuq", "--controller", ctl.Addr, "top", "--interval", "100ms"}, &errb)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\x1b[H\x1b[2J") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := press.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || errb.String() != "" {
			t.Errorf("exit %d stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gpuq top did not quit on q")
	}
	if n := strings.Count(out.String(), "gpuq top - "); n < 2 {
		t.Errorf("%d frames before q, want at least 2:\n%s", n, out.String())
	}
	if reqs := ctl.Requests(); len(reqs) < 6 {
		t.Errorf("%d requests, want three per frame", len(reqs))
	}
}
