package node

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestWatchDeltaOutOfStepAsksAgain: a delta line that does not follow the
// generation the agent holds (the line before it was lost) is never
// applied: the agent drops the stream, asks again, and acts on the whole
// set the new stream opens with. Here the lost line cancelled job 1 and
// the next one places job 2: applied onto the set the agent held, job 1
// would run on, cancelled.
func TestWatchDeltaOutOfStepAsksAgain(t *testing.T) {
	a1 := asg(1, t.TempDir())
	a2 := asg(2, t.TempDir())
	a2.Alloc.Nodes[0].GPUs = []string{"GPU-c"}
	cancelled := a1
	cancelled.Stop, cancelled.StopState, cancelled.StopReason = true, spec.StateCancelled, "cancelled by the test"
	started := make(chan struct{})
	line := func(w http.ResponseWriter, r api.AssignmentsResponse) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Error(err)
			return
		}
		w.Write(append(b, '\n'))
		http.NewResponseController(w).Flush()
	}
	e := newEnv(t, func(e *env) {
		e.fc.watch = func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set(api.HeaderWatch, "1")
			if n == 1 {
				line(w, api.AssignmentsResponse{Generation: 1, Assignments: []api.Assignment{a1}})
				select {
				case <-started:
				case <-r.Context().Done():
					return
				}
				// Generation 2 (job 1 cancelled) is lost; 3 follows it.
				line(w, api.AssignmentsResponse{Generation: 3, Delta: true, Base: 2, Assignments: []api.Assignment{a2}})
			} else {
				line(w, api.AssignmentsResponse{Generation: 3, Assignments: []api.Assignment{cancelled, a2}})
			}
			<-r.Context().Done()
		}
	})
	e.waitStarted(t, ContainerID(1, 1, "node-1"))
	close(started)
	if ev := e.waitExited(t, a1.Alloc.ID); ev.State != spec.StateCancelled {
		t.Fatalf("job 1 ended %s; want CANCELLED", ev.State)
	}
	e.waitStarted(t, ContainerID(2, 1, "node-1"))
	e.fc.mu.Lock()
	n := e.fc.watches
	e.fc.mu.Unlock()
	if n < 2 {
		t.Fatalf("%d watch requests; want the stream asked again after the out-of-step delta", n)
	}
}
