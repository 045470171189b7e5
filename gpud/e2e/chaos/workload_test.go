package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// The workload: a steady stream of submissions from the login host (one
// sbatch process each, as users run it), half of them 2-node jobs whose
// batch script runs a step on both nodes, and a squeue every 2 s. Every
// CLI call is logged with its start, duration, exit status and output:
// the clients' own log, which the checker reads.

// gangScript is a 2-node job: its step's two tasks, one on each node,
// print numbered lines at a steady pace and exit with the given code; the
// batch script prints srun's exit status.
const gangScript = `#!/bin/bash
echo "batch $SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST"
srun -N2 -l bash -c 'for i in $(seq 1 '"$1"'); do echo "line $i of task $SLURM_PROCID"; sleep '"$2"'; done; exit '"$3"
echo "srun rc=$?"
`

// singleScript is a 1-node job.
const singleScript = `#!/bin/bash
echo "single $SLURM_JOB_ID"
sleep "$1"
echo done
`

// call is one CLI call the workload made.
type call struct {
	Kind   string // sbatch, squeue, probe
	Name   string // the job's name (sbatch, probe)
	Start  time.Time
	Dur    time.Duration
	Code   int
	Stdout string
	Stderr string
	// JobID is the acknowledged job (sbatch --parsable printed it).
	JobID spec.JobID
}

func (c call) acked() bool { return c.Code == 0 && c.JobID != 0 }

// plan is what a submitted job was asked to do.
type plan struct {
	name  string
	gang  bool
	lines int
	pace  string
	code  int
}

// shape is how much the stream submits: at most waiting of its jobs
// pending at once, and a 2-node job's step of lines lines, one each half
// second.
type shape struct {
	waiting int
	lines   int
}

var (
	// suiteShape keeps the nodes busy through a long run.
	suiteShape = shape{waiting: 6, lines: 60}
	// shortShape keeps a gang running without a queue to drain after it.
	shortShape = shape{waiting: 2, lines: 40}
)

type workload struct {
	c     *cluster
	addrs string // GPUD_CONTROLLER for the CLIs
	shape shape

	mu    sync.Mutex
	calls []call
	plans map[string]plan
	n     int

	stop    chan struct{}
	started bool
	wg      sync.WaitGroup
}

// streaming says the stream was started (and not halted).
func (w *workload) streaming() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started
}

func newWorkload(c *cluster, addrs string) *workload {
	w := &workload{c: c, addrs: addrs, shape: suiteShape, plans: map[string]plan{}, stop: make(chan struct{})}
	for name, body := range map[string]string{"gang.sh": gangScript, "single.sh": singleScript} {
		p := filepath.Join(c.work, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			c.t.Fatal(err)
		}
		if err := os.Chown(p, int(c.user.UID), int(c.user.GID)); err != nil {
			c.t.Fatal(err)
		}
	}
	return w
}

// run runs a CLI on the login host and logs the call. A call is given a
// minute: far above the 12 s budget, so one that hangs is caught as such.
func (w *workload) run(kind, name string, args ...string) call {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := "sbatch"
	if kind == "squeue" {
		bin = "squeue"
	}
	cmd := w.c.loginCmd(ctx, w.addrs, bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cl := call{Kind: kind, Name: name, Start: time.Now()}
	err := cmd.Run()
	cl.Dur = time.Since(cl.Start)
	cl.Stdout, cl.Stderr = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		cl.Code = ee.ExitCode()
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			cl.Code = -1 // killed at the minute
		}
	default:
		cl.Code, cl.Stderr = -1, err.Error()
	}
	if kind != "squeue" && cl.Code == 0 {
		if id, err := strconv.ParseUint(strings.TrimSpace(cl.Stdout), 10, 64); err == nil {
			cl.JobID = spec.JobID(id)
		}
	}
	w.mu.Lock()
	w.calls = append(w.calls, cl)
	w.mu.Unlock()
	return cl
}

// submit submits the next job of the stream: 2-node and 1-node jobs in
// turn; a 2-node job's step lasts lines × pace and exits 0, 1 or 2.
func (w *workload) submit() call {
	w.mu.Lock()
	w.n++
	n := w.n
	w.mu.Unlock()
	p := plan{name: fmt.Sprintf("chaos-%d", n), gang: n%2 == 1, lines: w.shape.lines, pace: "0.5", code: n % 3}
	w.mu.Lock()
	w.plans[p.name] = p
	w.mu.Unlock()
	if p.gang {
		return w.run("sbatch", p.name, "--parsable", "-J", p.name, "-N2", "-c", "1", "--mem=64M", "-t", "30",
			"gang.sh", strconv.Itoa(p.lines), p.pace, strconv.Itoa(p.code))
	}
	return w.run("sbatch", p.name, "--parsable", "-J", p.name, "-c", "1", "--mem=64M", "-t", "30", "single.sh", "5")
}

// probe submits a held job that does nothing: measures how soon a
// submission is acknowledged (probes are cancelled at the end).
func (w *workload) probe(tag string) call {
	w.mu.Lock()
	w.n++
	name := fmt.Sprintf("probe-%s-%d", tag, w.n)
	w.mu.Unlock()
	return w.run("probe", name, "--parsable", "--hold", "-J", name, "-c", "1", "--wrap", "true")
}

// start runs the stream: a submission every 2 s while fewer than
// shape.waiting of the stream's jobs wait, and squeue every 2 s.
func (w *workload) start() {
	w.mu.Lock()
	w.started = true
	w.mu.Unlock()
	w.wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			if w.waiting() < w.shape.waiting {
				w.submit()
			}
		}
	})
	w.wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			w.run("squeue", "", "-h")
		}
	})
}

// waiting counts the stream's jobs pending now (0 when the group cannot
// say: the stream goes on).
func (w *workload) waiting() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jobs, err := w.c.admin.Jobs(ctx, api.JobFilter{States: []spec.JobState{spec.StatePending}})
	if err != nil {
		return 0
	}
	n := 0
	for _, j := range jobs {
		if strings.HasPrefix(j.Name, "chaos-") {
			n++
		}
	}
	return n
}

func (w *workload) halt() {
	w.mu.Lock()
	w.started = false
	w.mu.Unlock()
	close(w.stop)
	w.wg.Wait()
}

// snapshot copies the calls made so far, by start time.
func (w *workload) snapshot() []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]call(nil), w.calls...)
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// runningGangs waits until at least n of the workload's 2-node jobs run
// their step with at least left of it to go, and returns them.
func (w *workload) runningGangs(n int, within, left time.Duration) []spec.Job {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		jobs, err := w.c.admin.Jobs(ctx, api.JobFilter{States: []spec.JobState{spec.StateRunning}})
		cancel()
		var out []spec.Job
		for _, j := range jobs {
			w.mu.Lock()
			p, ok := w.plans[j.Name]
			w.mu.Unlock()
			if err != nil || !ok || !p.gang || len(j.Nodes) != 2 {
				continue
			}
			pace, _ := time.ParseDuration(p.pace + "s")
			for _, s := range j.Steps {
				if s.ID == "0" && s.State == spec.StateRunning && time.Until(s.StartTime.Add(time.Duration(p.lines)*pace)) >= left {
					out = append(out, j)
				}
			}
		}
		if len(out) >= n {
			return out
		}
		time.Sleep(time.Second)
	}
	return nil
}
