package loadtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestStartLatencyPerSecond: the plot's latency line is the p50 and p99
// of submit→start of the jobs that started between two samples, each
// second by itself, with seconds without a start left out.
func TestStartLatencyPerSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lt := &loadtest{jobs: map[spec.JobID]*ltJob{}}
	id := 0
	add := func(sent, start time.Duration) {
		id++
		lt.jobs[spec.JobID(id)] = &ltJob{sentAt: t0.Add(sent), startAt: t0.Add(start), starts: 1}
	}
	// Second 1: 100 jobs, 1..100 ms after their submission.
	for i := 1; i <= 100; i++ {
		add(500*time.Millisecond, 500*time.Millisecond+time.Duration(i)*time.Millisecond)
	}
	// Second 2: none. Second 3: 100 jobs, 1..100 s after submission.
	for i := 1; i <= 100; i++ {
		add(2500*time.Millisecond-time.Duration(i)*time.Second, 2500*time.Millisecond)
	}
	// A job never started and one not acknowledged count in no second.
	lt.jobs[spec.JobID(1000)] = &ltJob{sentAt: t0}
	lt.jobs[spec.JobID(1001)] = &ltJob{startAt: t0.Add(time.Second), starts: 1}
	s := &ltSampler{lt: lt}
	for i := 0; i <= 3; i++ {
		s.samples = append(s.samples, ltSample{at: t0.Add(time.Duration(i) * time.Second)})
	}
	ts, p50, p99 := s.startLatency()
	want := [][3]float64{{1, 0.051, 0.100}, {3, 51, 100}}
	if len(ts) != len(want) {
		t.Fatalf("seconds %v (p50 %v, p99 %v): want %d seconds with starts", ts, p50, p99, len(want))
	}
	for i, w := range want {
		if ts[i] != w[0] || p50[i] != w[1] || p99[i] != w[2] {
			t.Errorf("second %d: at %g p50 %g p99 %g, want at %g p50 %g p99 %g", i, ts[i], p50[i], p99[i], w[0], w[1], w[2])
		}
	}
	svg := filepath.Join(t.TempDir(), "run.svg")
	if err := s.plot(svg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"starts/s", "queue depth", "submit to start", "p99", "p50"} {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("plot has no %q", w)
		}
	}
}
