package node

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

// BenchmarkAssignmentsLine is what a node agent does with one line of its
// assignments watch stream, once the client has made the line the whole
// set (api's heldSet; BenchmarkWatchLine measures the decoding): a node
// with 8 running one-GPU jobs (the live loadtest's node, full) takes a
// line that changes none of them, as each line is for the jobs it does
// not place or end. The agent translates the starts to its clock,
// reconciles every allocation with its runner, and the runners take
// what they are handed. cpu-ns/op is the process's CPU time (getrusage),
// the runners' goroutines included.
func BenchmarkAssignmentsLine(b *testing.B) {
	base, err := os.MkdirTemp("/dev/shm", "asgline-")
	if err != nil {
		base = b.TempDir()
	} else {
		b.Cleanup(func() { os.RemoveAll(base) })
	}
	rt := fake.New() // the jobs run until they are stopped
	gpus := make([]spec.GPU, 8)
	for i := range gpus {
		gpus[i] = spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-%04d", i), MemMiB: 81559}
	}
	a, ctx := benchAgent(b, base, rt, gpus)
	uid, gid := benchJobIDs()
	started := time.Now().Add(-time.Minute)
	set := make([]api.Assignment, 8)
	for i := range set {
		jid := spec.JobID(1000 + i)
		self := spec.NodeAlloc{Node: "n1", CPUs: 1, MemMiB: 1024, GPUs: []string{gpus[i].UUID}}
		set[i] = api.Assignment{
			Job: spec.Job{ID: jid, UID: uint32(uid), GID: uint32(gid), User: "lt", Attempt: 1, State: spec.StateRunning,
				SubmitTime: spec.NewTime(started), StartTime: spec.NewTime(started), JobSpec: spec.JobSpec{
					Name: "lt", Partition: "gpu", Account: "acct", Script: "#!/bin/sh\ntrue\n", TimeLimit: spec.Duration(time.Hour),
					Env: []string{"LOADTEST_RUN_MS=3000"}, WorkDir: "/tmp", SubmitDir: "/tmp", Output: "/dev/null"}},
			Alloc: spec.Alloc{ID: fmt.Sprintf("a-%d-1", jid), JobID: jid, Attempt: 1, StartTime: spec.NewTime(started),
				Nodes: []spec.NodeAlloc{self}},
			ClusterName: "gpud", Gate: "off",
		}
	}
	line := func() *api.AssignmentsResponse {
		// The controller's clock is this process's; each line carries
		// the starts as stamped, the same at every line.
		return &api.AssignmentsResponse{Generation: 1, Now: time.Now(), Assignments: append([]api.Assignment(nil), set...)}
	}
	a.answered(ctx, time.Now(), time.Now(), line()) // the runners start
	for i := range set {
		id := ContainerID(set[i].Job.ID, 1, "n1")
		for deadline := time.Now().Add(10 * time.Second); ; {
			if st, ok := rt.Status(id); ok && st == runtime.StatusRunning {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("job %d's container is not running after 10 s", set[i].Job.ID)
			}
			time.Sleep(time.Millisecond)
		}
	}
	lines := make([]*api.AssignmentsResponse, 0, 1024)
	cpu0 := processCPU()
	b.ReportAllocs()
	for b.Loop() {
		if len(lines) == 0 {
			// Made ahead, outside the timer's view of the work per line
			// (but in cpu-ns/op: a copy of the 8 per line).
			b.StopTimer()
			for range cap(lines) {
				lines = append(lines, line())
			}
			b.StartTimer()
		}
		r := lines[len(lines)-1]
		lines = lines[:len(lines)-1]
		a.answered(ctx, time.Now(), time.Now(), r)
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if n := len(a.RunningJobs()); n != len(set) {
		b.Fatalf("%d jobs running after the lines; want %d", n, len(set))
	}
}
