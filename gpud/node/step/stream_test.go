package step

import (
	"bufio"
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// TestStepStreamHoldsOutputUntilStarted: a task's output written while
// the step starts reaches srun only after the step's started message (so
// an srun that has seen output knows the step and can follow it again
// after an agent restart); messages pass the gate, and release twice is
// harmless.
func TestStepStreamHoldsOutputUntilStarted(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	out := &stream{bw: bufio.NewWriter(lockedWriter{&buf, &mu})}
	out.holdOutput()
	done := make(chan struct{})
	go func() {
		defer close(done)
		out.output(api.StepStdout, 0, []byte("early\n"))
	}()
	select {
	case <-done:
		t.Fatal("output passed a held stream")
	case <-time.After(50 * time.Millisecond):
	}
	out.send(api.StepMsg{Kind: api.StepStarted, Step: 4, NTasks: 1})
	out.releaseOutput()
	<-done
	out.releaseOutput()
	out.output(api.StepStdout, 0, []byte("late\n"))

	mu.Lock()
	br := bufio.NewReader(bytes.NewReader(buf.Bytes()))
	mu.Unlock()
	var kinds []string
	for {
		m, err := api.ReadStepFrame(br)
		if err != nil {
			break
		}
		kinds = append(kinds, m.Kind+":"+string(m.Data))
	}
	want := []string{api.StepStarted + ":", api.StepStdout + ":early\n", api.StepStdout + ":late\n"}
	if len(kinds) != len(want) {
		t.Fatalf("frames %q; want %q", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("frames %q; want %q", kinds, want)
		}
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
