package node

import (
	"bytes"
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

// recSink collects a relay's output.
type recSink struct {
	mu  sync.Mutex
	got []heldOutput
}

func (s *recSink) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, heldOutput{kind, task, bytes.Clone(p)})
}

// TestStepRelayHoldsThenPasses: a re-adopted step's output is held, in
// order, until srun reattaches; past maxHeldOutput the writer waits (the
// task's output stays in its FIFO) instead of anything being dropped.
func TestStepRelayHoldsThenPasses(t *testing.T) {
	s := newStepRelay()
	s.output(api.StepStdout, 0, []byte("a"))
	s.output(api.StepStderr, 1, []byte("b"))
	big := make([]byte, maxHeldOutput)
	s.output(api.StepStdout, 0, big) // fills the relay
	blocked := make(chan struct{})
	go func() {
		s.output(api.StepStdout, 0, []byte("after"))
		close(blocked)
	}()
	select {
	case <-blocked:
		t.Fatal("the relay took output past maxHeldOutput before srun reattached")
	case <-time.After(100 * time.Millisecond):
	}
	var sink recSink
	s.attach(&sink)
	<-blocked
	s.output(api.StepStdout, 2, []byte("live"))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var order []string
	for _, h := range sink.got {
		if len(h.data) < 10 {
			order = append(order, h.kind+":"+string(h.data))
		}
	}
	if want := []string{"out:a", "err:b", "out:after", "out:live"}; !slices.Equal(order, want) || len(sink.got) != 5 {
		t.Errorf("relayed %q (%d frames), want %q and the big frame", order, len(sink.got), want)
	}
}

// TestStepRelayClose: a step no srun came back for drops its output and
// never blocks its tasks' writers.
func TestStepRelayClose(t *testing.T) {
	s := newStepRelay()
	s.output(api.StepStdout, 0, make([]byte, maxHeldOutput))
	done := make(chan struct{})
	go func() { s.output(api.StepStdout, 0, []byte("x")); close(done) }()
	time.Sleep(50 * time.Millisecond)
	s.close()
	<-done
	var sink recSink
	s.attach(&sink)
	if len(sink.got) != 0 {
		t.Errorf("a closed relay passed on %d frames", len(sink.got))
	}
}

// TestStepRecords: running steps are recorded in the job directory, and
// a restarted agent's runner finds the steps srun may follow again. (Step
// numbers are the outbox's: stepres_test.go.)
func TestStepRecords(t *testing.T) {
	state := t.TempDir()
	a := &Agent{runnerDeps: runnerDeps{cfg: Config{StateDir: state, Name: "n1"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	r := &runner{d: &a.runnerDeps, id: "c1", jobID: 7}
	if err := os.MkdirAll(r.jobDir(), 0o711); err != nil {
		t.Fatal(err)
	}
	rec := stepRecord{Step: 2, NTasks: 2, Nodes: []string{"n1"}, Tasks: [][]int{{0, 1}}, Pty: true}
	r.recordStep(rec)
	if fi, err := os.Stat(filepath.Join(r.jobDir(), stepFile(2))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("step record: %v %v; want a file only root reads", fi, err)
	}
	// The agent restarts: a new runner for the same container.
	r2 := &runner{d: &a.runnerDeps, id: "c1", jobID: 7}
	r2.readoptSteps(context.Background(), a.log)
	if got, ok := r2.resumed.recs[2]; !ok || !got.Pty || got.NTasks != 2 {
		t.Errorf("re-read step record %+v (%v), want %+v", got, ok, rec)
	}
	r2.forgetStep(2)
	if _, err := os.Stat(filepath.Join(r.jobDir(), stepFile(2))); !os.IsNotExist(err) {
		t.Errorf("step record left after the step ended: %v", err)
	}
}

// TestRestartedAgentBooksRunningSteps: a restarted agent books again
// what a re-adopted step holds, so a new step is not given its GPUs;
// they are free once the re-adopted step ends.
func TestRestartedAgentBooksRunningSteps(t *testing.T) {
	state := t.TempDir()
	a := &Agent{runnerDeps: runnerDeps{cfg: Config{StateDir: state, Name: "n1"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	nd := spec.NodeAlloc{Node: "n1", CPUs: 8, GPUs: []string{"G0", "G1", "G2", "G3"}}
	asg := &api.Assignment{Alloc: spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{nd}}}
	r := &runner{d: &a.runnerDeps, id: "c1", jobID: 7, asg: asg}
	if err := os.MkdirAll(r.jobDir(), 0o711); err != nil {
		t.Fatal(err)
	}
	l := layout{nodes: []spec.NodeAlloc{nd}, tasks: [][]int{{0}}}
	gr, ok := r.ledger().take(api.StepRequest{GPUsPerNode: 2, Exact: true}, l)
	if !ok {
		t.Fatal("the first step does not fit an empty allocation")
	}
	r.recordStep(stepRecord{Step: 0, NTasks: 1, Nodes: []string{"n1"}, Tasks: l.tasks, Grant: recordGrant(gr)})

	// The agent restarts: a new runner, an empty ledger, the record read.
	r2 := &runner{d: &a.runnerDeps, id: "c1", jobID: 7, asg: asg}
	r2.readoptSteps(context.Background(), a.log)
	if _, ok := r2.ledger().take(api.StepRequest{GPUsPerNode: 3, Exact: true}, l); ok {
		t.Fatal("a new step got 3 of 4 GPUs while the re-adopted step holds 2")
	}
	gr2, ok := r2.ledger().take(api.StepRequest{GPUsPerNode: 2, Exact: true}, l)
	if !ok || len(gr2.gpus[0]) != 2 || slices.ContainsFunc(gr2.gpus[0], func(k int) bool { return slices.Contains(gr.gpus[0], k) }) {
		t.Fatalf("a new step of 2 GPUs: %v %v; want the 2 the re-adopted step does not hold (it holds %v)", gr2.gpus, ok, gr.gpus)
	}
	r2.ledger().give(l, gr2)
	r2.resumed.mu.Lock()
	give := r2.resumed.recs[0].giveBack
	r2.resumed.mu.Unlock()
	give()
	give() // once only
	if gr3, ok := r2.ledger().take(api.StepRequest{GPUsPerNode: 4, Exact: true}, l); !ok || len(gr3.gpus[0]) != 4 {
		t.Errorf("after the re-adopted step ended, a 4-GPU step: %v %v; want all 4", gr3.gpus, ok)
	}
}
