package step

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// fakeHost is a node agent as its steps see it: allocations by ID, the
// events recorded and step numbers counted in memory.
type fakeHost struct {
	mu     sync.Mutex
	allocs map[string]*Alloc
	events []api.AllocEvent
	next   map[string]int
	failed []string
	// holdEnd, when set, holds each step end's record until closed (a
	// slow outbox commit).
	holdEnd chan struct{}
}

func (h *fakeHost) Alloc(id string) *Alloc {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.allocs[id]
}

// add makes al the host's allocation id: its node may serve peers
// already (a restarted agent's, which they dial again at once).
func (h *fakeHost) add(id string, al *Alloc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.allocs[id] = al
}

func (h *fakeHost) Record(_ context.Context, ev api.AllocEvent) error {
	h.mu.Lock()
	hold := h.holdEnd
	h.mu.Unlock()
	if hold != nil && ev.Kind == api.EventStepEnded {
		<-hold
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
	return nil
}

func (h *fakeHost) ReserveIDs(_ context.Context, allocID string, n int) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.next[allocID]
	h.next[allocID] = first + n
	return first, nil
}

func (h *fakeHost) Fail(allocID, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed = append(h.failed, allocID+": "+reason)
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// testNode is node name's step service over a fakeHost.
func testNode(name string) (*Node, *fakeHost) {
	h := &fakeHost{allocs: map[string]*Alloc{}, next: map[string]int{}}
	return NewNode(Config{Node: name, Clock: realClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, h), h
}

// testAlloc is allocation asg's steps on n, Ready in a job directory
// under the test's temporary directory (an agent restart: call it again
// with the same dir).
func testAlloc(t *testing.T, n *Node, h *fakeHost, asg *api.Assignment, dir string) *Alloc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	al := n.NewAlloc(asg.Alloc.ID, asg.Job.ID)
	al.Ready(asg, asg.Alloc.Nodes[0], "c1", dir, []string{"A=1"}, n.cfg.Log)
	h.add(asg.Alloc.ID, al)
	return al
}

// TestStepRecords: running steps are recorded in the job directory, and
// a restarted agent's allocation finds the steps srun may follow again.
func TestStepRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	n, h := testNode("n1")
	asg := &api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{{Node: "n1"}}}}
	al := testAlloc(t, n, h, asg, dir)
	rec := stepRecord{Step: 2, NTasks: 2, Nodes: []string{"n1"}, Tasks: [][]int{{0, 1}}, Pty: true}
	al.recordStep(rec)
	if fi, err := os.Stat(filepath.Join(dir, stepFile(2))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("step record: %v %v; want a file only root reads", fi, err)
	}
	// The agent restarts: new steps for the same container.
	al2 := testAlloc(t, n, h, asg, dir)
	al2.readopt(context.Background(), nil)
	if got, ok := al2.resumed.recs[2]; !ok || !got.Pty || got.NTasks != 2 {
		t.Errorf("re-read step record %+v (%v), want %+v", got, ok, rec)
	}
	al2.forgetStep(2)
	if _, err := os.Stat(filepath.Join(dir, stepFile(2))); !os.IsNotExist(err) {
		t.Errorf("step record left after the step ended: %v", err)
	}
}

// TestRestartedAgentBooksRunningSteps: a restarted agent books again
// what a re-adopted step holds, so a new step is not given its GPUs;
// they are free once the re-adopted step ends.
func TestRestartedAgentBooksRunningSteps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	n, h := testNode("n1")
	nd := spec.NodeAlloc{Node: "n1", CPUs: 8, GPUs: []string{"G0", "G1", "G2", "G3"}}
	asg := &api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{nd}}}
	al := testAlloc(t, n, h, asg, dir)
	l := layout{nodes: []spec.NodeAlloc{nd}, tasks: [][]int{{0}}}
	gr, ok := al.ledger().take(api.StepRequest{GPUsPerNode: 2, Exact: true}, l)
	if !ok {
		t.Fatal("the first step does not fit an empty allocation")
	}
	al.recordStep(stepRecord{Step: 0, NTasks: 1, Nodes: []string{"n1"}, Tasks: l.tasks, Grant: recordGrant(gr)})

	// The agent restarts: new steps, an empty ledger, the record read.
	al2 := testAlloc(t, n, h, asg, dir)
	al2.readopt(context.Background(), nil)
	if _, ok := al2.ledger().take(api.StepRequest{GPUsPerNode: 3, Exact: true}, l); ok {
		t.Fatal("a new step got 3 of 4 GPUs while the re-adopted step holds 2")
	}
	gr2, ok := al2.ledger().take(api.StepRequest{GPUsPerNode: 2, Exact: true}, l)
	if !ok || len(gr2.gpus[0]) != 2 || slices.ContainsFunc(gr2.gpus[0], func(k int) bool { return slices.Contains(gr.gpus[0], k) }) {
		t.Fatalf("a new step of 2 GPUs: %v %v; want the 2 the re-adopted step does not hold (it holds %v)", gr2.gpus, ok, gr.gpus)
	}
	al2.ledger().give(l, gr2)
	al2.resumed.mu.Lock()
	give := al2.resumed.recs[0].giveBack
	al2.resumed.mu.Unlock()
	give()
	give() // once only
	if gr3, ok := al2.ledger().take(api.StepRequest{GPUsPerNode: 4, Exact: true}, l); !ok || len(gr3.gpus[0]) != 4 {
		t.Errorf("after the re-adopted step ended, a 4-GPU step: %v %v; want all 4", gr3.gpus, ok)
	}
}
