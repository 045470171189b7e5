package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
	gpuq "github.com/gpud/gpud/gpuq/app"
)

func client(t testing.TB, addr string) *api.Client {
	t.Helper()
	c, err := api.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func jobSpec(name string) spec.JobSpec {
	return spec.JobSpec{Name: name, Script: "#!/bin/sh\necho hi\n", WorkDir: "/tmp", Requeue: true}
}

func inventory(name string, gpus int) spec.Inventory {
	inv := spec.Inventory{Name: name, Addr: "10.0.0.1", CPUs: 16, MemMiB: 64000}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: "h100"})
	}
	return inv
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestListViews(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	for _, name := range []string{"a", "b"} {
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec(name)}); err != nil {
			t.Fatal(err)
		}
	}
	// A scheduling cycle may update reasons and priorities between two
	// calls: compare a brief listing only with a full one taken while
	// nothing changed (the same full listing before and after it).
	var full, brief []spec.Job
	for try := 0; ; try++ {
		before, err := c.Jobs(ctx, api.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if brief, err = c.Jobs(ctx, api.JobFilter{View: api.ViewBrief}); err != nil {
			t.Fatal(err)
		}
		if full, err = c.Jobs(ctx, api.JobFilter{}); err != nil {
			t.Fatal(err)
		}
		if cmp.Equal(before, full) {
			break
		}
		if try == 50 {
			t.Fatal("the job list kept changing; no stable pair of listings to compare")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(full) != 2 || len(brief) != 2 {
		t.Fatalf("listed %d full and %d brief jobs, want 2 and 2", len(full), len(brief))
	}
	for i, f := range full {
		// The brief view is the full one less what no table shows.
		want := spec.Job{ID: f.ID, JobSpec: spec.JobSpec{Name: f.Name, Partition: f.Partition, QOS: f.QOS, Account: f.Account,
			TimeLimit: f.TimeLimit, Resources: spec.Resources{Nodes: f.Resources.Nodes, GPUsPerNode: f.Resources.GPUsPerNode,
				GPUModel: f.Resources.GPUModel, GPUProfile: f.Resources.GPUProfile, GPUFraction: f.Resources.GPUFraction, TotalGPUs: f.Resources.TotalGPUs}},
			User: f.User, State: f.State, Reason: f.Reason, ExitCode: f.ExitCode, Priority: f.Priority, SubmitTime: f.SubmitTime,
			StartTime: f.StartTime, EndTime: f.EndTime, ExpectedStart: f.ExpectedStart, Nodes: f.Nodes, GPUs: f.GPUs}
		if diff := cmp.Diff(want, brief[i]); diff != "" {
			t.Errorf("brief job %d (-want +got):\n%s", f.ID, diff)
		}
		if f.WorkDir != "/tmp" || f.Script != "" {
			t.Errorf("full listing of job %d: work_dir %q, script %q; want /tmp and no script", f.ID, f.WorkDir, f.Script)
		}
	}
	if _, err := c.Jobs(ctx, api.JobFilter{View: "tiny"}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("view=tiny: %v; want an invalid-request error", err)
	}
}

func TestSubmitListShowCancel(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)

	r1, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("a")})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	r2, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("b")})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if r1.ID != 1 || r2.ID != 2 {
		t.Fatalf("ids = %d, %d; want 1, 2", r1.ID, r2.ID)
	}
	j, err := c.Job(ctx, r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != spec.StatePending || j.Partition != "batch" || j.QOS != "normal" || j.User == "" || j.StdoutPath != "/tmp/gpud-1.out" {
		t.Errorf("job 1 = state %s partition %q qos %q user %q stdout %q; want PENDING batch normal, a user and /tmp/gpud-1.out",
			j.State, j.Partition, j.QOS, j.User, j.StdoutPath)
	}
	if _, err := c.JobAction(ctx, r1.ID, "cancel", api.JobActionRequest{}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	list, err := c.Jobs(ctx, api.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(list); !cmp.Equal(got, []spec.JobID{2}) {
		t.Errorf("default listing = %v, want [2] (cancelled job hidden)", got)
	}
	all, err := c.Jobs(ctx, api.JobFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(all); !cmp.Equal(got, []spec.JobID{1, 2}) {
		t.Errorf("all=1 listing = %v, want [1 2]", got)
	}
	cancelled, err := c.Jobs(ctx, api.JobFilter{States: []spec.JobState{spec.StateCancelled}})
	if err != nil || len(cancelled) != 1 || cancelled[0].EndTime.IsZero() {
		t.Errorf("state=CANCELLED listing = %v (%v), want job 1 with an end time", cancelled, err)
	}
	if _, err := c.JobAction(ctx, r1.ID, "cancel", api.JobActionRequest{}); !errors.Is(err, spec.ErrConflict) {
		t.Errorf("second cancel error = %v, want a conflict", err)
	}
	if _, err := c.Job(ctx, 99); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("Job(99) error = %v, want not found", err)
	}
}

func ids(jobs []spec.Job) []spec.JobID {
	var out []spec.JobID
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

func TestSubmitValidation(t *testing.T) {
	addr, _ := servertest.TestServer(t, func(c *controller.Config) {
		c.Partitions = []controller.Partition{{Name: "gpu", Default: true, MaxTime: time.Hour}, {Name: "debug"}}
	})
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 8)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*spec.JobSpec)
		want string
	}{
		{"unknown partition", func(j *spec.JobSpec) { j.Partition = "nope" }, `partition "nope" does not exist; choose one of: gpu, debug`},
		{"time over max", func(j *spec.JobSpec) { j.TimeLimit = spec.Duration(2 * time.Hour) }, "exceeds partition gpu's limit of 1:00:00"},
		{"empty script", func(j *spec.JobSpec) { j.Script = " " }, "script is empty"},
		{"negative nodes", func(j *spec.JobSpec) { j.Resources.Nodes = -1 }, "--nodes=-1 must be at least 1"},
		{"absurd nodes", func(j *spec.JobSpec) { j.Resources.Nodes = 100000 }, "exceeds the limit of 1024"},
		{"long name", func(j *spec.JobSpec) { j.Name = strings.Repeat("x", 300) }, "at most 256"},
		{"array too big", func(j *spec.JobSpec) { j.Array = "0-20000" }, "more than 10000 tasks, the limit per array"},
		{"dependency on unknown job", func(j *spec.JobSpec) { j.Depend = "afterok:999" }, "--dependency=afterok:999: job 999 does not exist"},
		{"too many gpus", func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 9 }, "exceeds every node of partition gpu (0 could hold it; largest: n1 with 8× gpu, 16 CPUs, 64000 MiB)"},
		{"gang too big", func(j *spec.JobSpec) { j.Resources.Nodes = 2 }, "requested 2 node(s)"},
		{"unknown qos", func(j *spec.JobSpec) { j.QOS = "gold" }, `QOS "gold" does not exist; choose one of: normal`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := jobSpec(tc.name)
			tc.mod(&js)
			_, err := c.Submit(ctx, api.SubmitRequest{Job: js})
			if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Submit error = %v; want an invalid-request error containing %q", err, tc.want)
			}
		})
	}
}

func TestBadJSON(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	sock := strings.TrimPrefix(addr, "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	for _, body := range []string{`{"job": {"nam": "x"}}`, `{not json`, ``} {
		resp, err := hc.Post("http://gpud/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid"`) || !strings.Contains(string(b), "request body") {
			t.Errorf("POST %q: %d %s; want 400 with an invalid-code message about the body", body, resp.StatusCode, b)
		}
	}
	resp, err := hc.Get("http://gpud/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestNodeProtocol drives a fake agent through the protocol: register,
// long-poll assignments, started and exited events, stale events.
func TestNodeProtocol(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)

	reg, err := c.Register(ctx, inventory("n1", 2))
	if err != nil || reg.HeartbeatIntervalSec != 5 {
		t.Fatalf("Register = %+v, %v; want heartbeat 5s", reg, err)
	}
	first, err := c.Assignments(ctx, "n1", 0, 0)
	if err != nil || len(first.Assignments) != 0 {
		t.Fatalf("Assignments = %+v, %v; want none", first, err)
	}
	// A long poll at the current generation returns when a job starts.
	type result struct {
		r   api.AssignmentsResponse
		err error
	}
	polled := make(chan result, 1)
	go func() {
		r, err := c.Assignments(ctx, "n1", first.Generation, 20*time.Second)
		polled <- result{r, err}
	}()
	js := jobSpec("train")
	js.Resources.GPUsPerNode = 2
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	res := <-polled
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.r.Generation <= first.Generation || len(res.r.Assignments) != 1 {
		t.Fatalf("long poll = gen %d (was %d), %d assignments; want a newer gen and 1", res.r.Generation, first.Generation, len(res.r.Assignments))
	}
	a := res.r.Assignments[0]
	wantAlloc := spec.Alloc{ID: fmt.Sprintf("%d.1", sub.ID), JobID: sub.ID, Attempt: 1, StartTime: a.Alloc.StartTime,
		Nodes: []spec.NodeAlloc{{Node: "n1", Addr: "10.0.0.1", CPUs: 1, GPUs: []string{"GPU-n1-0", "GPU-n1-1"}}}}
	if diff := cmp.Diff(wantAlloc, a.Alloc); diff != "" {
		t.Errorf("alloc (-want +got):\n%s", diff)
	}
	if a.Stop || a.Job.Script != js.Script || a.Job.State != spec.StateRunning {
		t.Errorf("assignment stop=%v state=%s script=%q; want a running job with its script", a.Stop, a.Job.State, a.Job.Script)
	}

	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	ack, err := c.Events(ctx, "n1", []api.AllocEvent{
		{Seq: 1, Node: "n1", AllocID: a.Alloc.ID, JobID: sub.ID, Kind: api.EventStarted, Time: spec.NewTime(start)},
		// A stale alloc's exit must not touch the job.
		{Seq: 2, Node: "n1", AllocID: fmt.Sprintf("%d.0", sub.ID), JobID: sub.ID, Kind: api.EventExited, State: spec.StateFailed, ExitCode: 3},
	})
	if err != nil || ack.AckedSeq != 2 {
		t.Fatalf("Events = %+v, %v; want ack 2", ack, err)
	}
	j, _ := c.Job(ctx, sub.ID)
	if j.State != spec.StateRunning || !j.StartTime.Equal(start) {
		t.Fatalf("after started: state %s start %v; want RUNNING at %v", j.State, j.StartTime, start)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].State != spec.NodeAllocated {
		t.Fatalf("Nodes = %+v, %v; want n1 ALLOCATED", nodes, err)
	}

	waited := make(chan spec.Job, 1)
	go func() {
		j, _ := c.WaitJob(ctx, sub.ID)
		waited <- j
	}()
	exit := api.AllocEvent{Seq: 3, Node: "n1", AllocID: a.Alloc.ID, JobID: sub.ID, Kind: api.EventExited, State: spec.StateCompleted, Time: spec.NewTime(start.Add(time.Minute))}
	for range 2 { // a resent event is harmless
		if ack, err := c.Events(ctx, "n1", []api.AllocEvent{exit}); err != nil || ack.AckedSeq != 3 {
			t.Fatalf("Events = %+v, %v; want ack 3", ack, err)
		}
	}
	done := <-waited
	if done.State != spec.StateCompleted || !done.EndTime.Equal(start.Add(time.Minute)) {
		t.Fatalf("waited job = %s ended %v; want COMPLETED at %v", done.State, done.EndTime, start.Add(time.Minute))
	}
	after, err := c.Assignments(ctx, "n1", 0, 0)
	if err != nil || len(after.Assignments) != 0 {
		t.Fatalf("Assignments after exit = %+v, %v; want none", after, err)
	}
	if err := c.Heartbeat(ctx, "n1", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(ctx, "nope", nil); !errors.Is(err, spec.ErrNotFound) {
		t.Fatalf("heartbeat of unknown node: %v, want not found", err)
	}
}

func TestCancelRunningStopsOnNode(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("x")})
	if err != nil {
		t.Fatal(err)
	}
	a := waitAssignment(t, c, "n1", func(a api.Assignment) bool { return a.Job.ID == sub.ID && !a.Stop })
	j, err := c.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{})
	if err != nil || j.State != spec.StateCompleting {
		t.Fatalf("cancel = %s, %v; want COMPLETING", j.State, err)
	}
	stop := waitAssignment(t, c, "n1", func(a api.Assignment) bool { return a.Stop })
	if stop.StopState != spec.StateCancelled || stop.Alloc.ID != a.Alloc.ID {
		t.Fatalf("stop assignment = %+v; want CANCELLED for %s", stop, a.Alloc.ID)
	}
	if _, err := c.Events(ctx, "n1", []api.AllocEvent{{Seq: 1, AllocID: a.Alloc.ID, JobID: sub.ID, Kind: api.EventExited, State: spec.StateCancelled, Signal: 15}}); err != nil {
		t.Fatal(err)
	}
	if j, _ := c.Job(ctx, sub.ID); j.State != spec.StateCancelled {
		t.Fatalf("after exit: %s, want CANCELLED", j.State)
	}
}

// waitAssignment polls (with a deadline) for an assignment matching ok.
func waitAssignment(t *testing.T, c *api.Client, node string, ok func(api.Assignment) bool) api.Assignment {
	t.Helper()
	ctx := ctxT(t)
	var gen uint64
	for {
		r, err := c.Assignments(ctx, node, gen, 10*time.Second)
		if err != nil {
			t.Fatalf("waiting for assignment: %v", err)
		}
		for _, a := range r.Assignments {
			if ok(a) {
				return a
			}
		}
		gen = r.Generation
	}
}

func TestRestartKeepsJobsAndCounter(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpud")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addr, _, stop := servertest.Start(t, nil, servertest.Options{Dir: dir})
	c := client(t, addr)
	ctx := ctxT(t)
	for range 5 {
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.JobAction(ctx, 5, "cancel", api.JobActionRequest{}); err != nil {
		t.Fatal(err)
	}
	stop()

	addr, _, _ = servertest.Start(t, nil, servertest.Options{Dir: dir})
	c = client(t, addr)
	all, err := c.Jobs(ctx, api.JobFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(all); !cmp.Equal(got, []spec.JobID{1, 2, 3, 4, 5}) || all[4].State != spec.StateCancelled {
		t.Fatalf("after restart: jobs %v (job 5 %s); want 1..5 with 5 CANCELLED", got, all[4].State)
	}
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("y")})
	if err != nil || sub.ID != 6 {
		t.Fatalf("submit after restart = %d, %v; want id 6", sub.ID, err)
	}
}

func BenchmarkSubmitParallel8(b *testing.B) {
	addr, _ := servertest.TestServer(b, nil)
	submitParallel8(b, addr, false)
}

// BenchmarkSubmitParallel8Keyed is BenchmarkSubmitParallel8 with an
// Idempotency-Key on every submission, as gpusubmit and sbatch send.
func BenchmarkSubmitParallel8Keyed(b *testing.B) {
	addr, _ := servertest.TestServer(b, nil)
	submitParallel8(b, addr, true)
}

// TestSubmitIdempotencyKeyHeader: POST /v1/jobs twice with one
// Idempotency-Key makes one job and answers both with its id; a
// malformed key is refused.
func TestSubmitIdempotencyKeyHeader(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	key := api.NewIdempotencyKey()
	a, err := c.Submit(ctxT(t), api.SubmitRequest{Job: jobSpec("k"), IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Submit(ctxT(t), api.SubmitRequest{Job: jobSpec("k"), IdempotencyKey: key})
	if err != nil || b.ID != a.ID {
		t.Errorf("resend with the same key: %+v %v; want job %d again", b, err, a.ID)
	}
	jobs, err := c.Jobs(ctxT(t), api.JobFilter{All: true})
	if err != nil || len(jobs) != 1 {
		t.Errorf("%d jobs (%v); want 1", len(jobs), err)
	}
	if _, err := c.Submit(ctxT(t), api.SubmitRequest{Job: jobSpec("k"), IdempotencyKey: "has space"}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("a key with a space: %v; want invalid", err)
	}
}

// submitParallel8 submits b.N jobs to addr from 8 concurrent clients and
// reports acknowledged submissions per second; keyed sends a fresh
// Idempotency-Key with each.
func submitParallel8(b *testing.B, addr string, keyed bool) {
	submitParallel8With(b, client(b, addr), keyed)
}

// submitParallel8With is submitParallel8 through c.
func submitParallel8With(b *testing.B, c *api.Client, keyed bool) {
	ctx := context.Background()
	js := jobSpec("bench")
	var next atomic.Int64
	lat := make([][]time.Duration, 8)
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				req := api.SubmitRequest{Job: js}
				if keyed {
					req.IdempotencyKey = api.NewIdempotencyKey()
				}
				sent := time.Now()
				if _, err := c.Submit(ctx, req); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(sent))
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
	// The CPU of this whole process (server, controller, SQLite and the 8
	// clients) per submission, and each call's time to its answer.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
}

func BenchmarkListJobs100k(b *testing.B) {
	addr, ctl := servertest.TestServer(b, nil)
	c := client(b, addr)
	ctx := context.Background()
	const n = 100000
	submitMany(b, ctl, n)
	b.ResetTimer()
	for b.Loop() {
		jobs, err := c.Jobs(ctx, api.JobFilter{})
		if err != nil || len(jobs) != n {
			b.Fatalf("listed %d jobs (%v), want %d", len(jobs), err, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
}

// BenchmarkListJobs100kBrief is BenchmarkListJobs100k in the brief view
// gpuq's table asks for.
func BenchmarkListJobs100kBrief(b *testing.B) {
	addr, ctl := servertest.TestServer(b, nil)
	c := client(b, addr)
	ctx := context.Background()
	const n = 100000
	submitMany(b, ctl, n)
	b.ResetTimer()
	for b.Loop() {
		jobs, err := c.Jobs(ctx, api.JobFilter{View: api.ViewBrief})
		if err != nil || len(jobs) != n {
			b.Fatalf("listed %d jobs (%v), want %d", len(jobs), err, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
}

// BenchmarkGpuqList100k runs gpuq itself (gpuq/app, output to io.Discard)
// against a controller with 100,000 pending jobs: `gpuq` (the table) and
// `gpuq --json`, end to end but for process start.
func BenchmarkGpuqList100k(b *testing.B) {
	addr, ctl := servertest.TestServer(b, nil)
	const n = 100000
	submitMany(b, ctl, n)
	for _, bc := range []struct{ name, arg string }{{"table", "--noheader"}, {"json", "--json"}} {
		b.Run(bc.name, func(b *testing.B) {
			var out countWriter
			for b.Loop() {
				out = 0
				a := gpuq.New()
				a.Writer, a.ErrWriter = &out, io.Discard
				if err := a.RunContext(context.Background(), []string{"gpuq", "--controller", addr, bc.arg}); err != nil {
					b.Fatal(err)
				}
			}
			if bc.name == "table" && out < n*40 {
				b.Fatalf("gpuq wrote %d bytes for %d jobs", out, n)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
		})
	}
}

// countWriter discards what it is given, counting the bytes.
type countWriter int

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}

// BenchmarkListJobs100kRaw lists the same queue but only reads the bytes:
// the server's share of BenchmarkListJobs100k, without client decoding.
func BenchmarkListJobs100kRaw(b *testing.B) {
	addr, ctl := servertest.TestServer(b, nil)
	const n = 100000
	submitMany(b, ctl, n)
	sock := strings.TrimPrefix(addr, "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	b.ResetTimer()
	var size int
	for b.Loop() {
		resp, err := hc.Get("http://gpud/v1/jobs")
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		size = len(body)
	}
	b.ReportMetric(float64(size)/n, "bytes/job")
}

// submitMany queues n jobs straight through the controller (16 at a
// time, so group commit keeps the setup short).
func submitMany(b *testing.B, ctl *controller.Controller, n int64) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	js := jobSpec("bench")
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= n {
				if _, err := ctl.Submit(context.Background(), controller.Caller{Known: true, User: "root"}, js); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSubmitValidationAllProblems: a job with three problems of its own
// (spec.JobSpec.Validate) is refused through the real server with all
// three named, each with its field. Before Validate the server passed a
// negative GPU count on to the controller, which stopped at its own
// checks, so --gpus-per-task and --open-mode were not named together
// with it.
func TestSubmitValidationAllProblems(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	js := jobSpec("three problems")
	js.Resources.GPUsPerNode = -1
	js.Tasks.GPUsPerTask = 1 << 20
	js.OpenMode = "sideways"
	_, err := c.Submit(ctx, api.SubmitRequest{Job: js})
	if !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("Submit error = %v; want invalid", err)
	}
	for _, want := range []string{"--gpus/--gpus-per-node must not be negative", "--gpus-per-task=1048576 is absurd",
		`--open-mode="sideways": use append or truncate`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Submit error = %q; want it to name %q", err, want)
		}
	}
}

// TestShutdownClosesUnusedConnections: a connection a client dialed but
// never sent a request on does not hold the server's shutdown. Before,
// http.Server.Shutdown counted it busy until it was 5 seconds old and so
// missed its 5-s deadline ("shut down API server: context deadline
// exceeded", which servertest reports as the test's error).
func TestShutdownClosesUnusedConnections(t *testing.T) {
	addr, _, stop := servertest.Start(t, nil, servertest.Options{})
	conn, err := net.Dial("unix", strings.TrimPrefix(addr, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A client dialed after it is accepted after it (the listener's
	// queue is in order), so once its call is answered the unused
	// connection is the server's, with no request yet.
	if _, err := client(t, addr).Jobs(ctxT(t), api.JobFilter{All: true}); err != nil {
		t.Fatal(err)
	}
	stop()
	// The server closed it: a read ends at once rather than at the
	// deadline.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("unused connection after shutdown: read %d bytes, err %v; want it closed", n, err)
	}
}
