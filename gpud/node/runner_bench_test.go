package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
	"github.com/gpud/gpud/runtime/safefs"
)

// BenchmarkRunnerJob is one job through a node agent's runner, start to
// reported exit, as gpud loadtest's agents run them: a one-GPU batch job
// on the host's root (the loadtest's job: a two-line script, output to
// /dev/null, a submit time, no --checkpoint, so its checkpoint directory
// is a run directory: checkpoint/run.go) whose fake container exits at
// once. Each job's runner does
// what it does on a node: the job directory, the checkpoint directory,
// the step socket served, the container config, the started and exited
// records (memory outbox, acknowledged as the sender would), the
// container deleted and the job directory removed. tmpfs: the state on
// /dev/shm (as the loadtest's agents); disk: in the test's temp dir, as a
// node's /var/lib/gpud. cpu-ns/op is the process's CPU time (getrusage),
// steadier than ns/op on a loaded machine. The agent logs as the
// loadtest's agents do (text, warnings and errors only).
func BenchmarkRunnerJob(b *testing.B) {
	b.Run("tmpfs", func(b *testing.B) {
		base, err := os.MkdirTemp("/dev/shm", "runnerjob-")
		if err != nil {
			b.Skip("no /dev/shm:", err)
		}
		b.Cleanup(func() { os.RemoveAll(base) })
		benchRunnerJob(b, base)
	})
	b.Run("disk", func(b *testing.B) { benchRunnerJob(b, b.TempDir()) })
}

func benchRunnerJob(b *testing.B, base string) {
	rt := fake.New()
	rt.SetDefault(fake.Script{ExitAtOnce: true})
	const uuid = "GPU-0000"
	a, ctx := benchAgent(b, base, rt, []spec.GPU{{UUID: uuid, MemMiB: 81559}})
	uid, gid := benchJobIDs()
	self := spec.NodeAlloc{Node: "n1", CPUs: 1, MemMiB: 1024, GPUs: []string{uuid}}
	cpu0 := processCPU()
	id := 0
	b.ReportAllocs()
	for b.Loop() {
		id++
		jid := spec.JobID(id)
		asg := &api.Assignment{
			Job: spec.Job{ID: jid, UID: uint32(uid), GID: uint32(gid), User: "lt", Attempt: 1, SubmitTime: spec.NewTime(time.Now()), JobSpec: spec.JobSpec{
				Name: "lt", Partition: "gpu", Script: "#!/bin/sh\ntrue\n", TimeLimit: spec.Duration(time.Hour),
				Env: []string{"LOADTEST_RUN_MS=0"}, WorkDir: "/tmp", SubmitDir: "/tmp", Output: "/dev/null"}},
			Alloc: spec.Alloc{ID: fmt.Sprintf("a%d", id), JobID: jid, Attempt: 1, StartTime: spec.NewTime(time.Now()),
				Nodes: []spec.NodeAlloc{self}},
		}
		r := newRunner(&a.runnerDeps, asg, self, allocRecord{})
		a.startRunner(ctx, r)
		<-r.done
		if st, ok := rt.Status(r.id); ok {
			b.Fatalf("job %d's container is still there (%v)", id, st)
		}
		evs, err := a.ob.pending(ctx, 10)
		if err != nil || len(evs) != 2 || evs[1].Kind != api.EventExited || evs[1].State != spec.StateCompleted {
			b.Fatalf("job %d: outbox holds %+v (%v), want its start and its COMPLETED exit", id, evs, err)
		}
		if err := a.ob.ack(ctx, evs[1].Seq); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if _, err := os.Stat(filepath.Join(a.cfg.jobsDir(), ContainerID(spec.JobID(id), 1, "n1"))); !os.IsNotExist(err) {
		b.Fatalf("the last job's directory is still there: %v", err)
	}
}

// benchAgent is a node agent for the benchmarks that drive its runners
// directly (no Run): its state under base, jobs/ open and the checkpoint
// root made as Run does, the step sockets served, a memory outbox, and
// the agent logging as the loadtest's agents do (text, warnings and
// errors only). At the benchmark's end its context is cancelled and its
// runners have returned.
func benchAgent(b *testing.B, base string, rt runtime.Runtime, gpus []spec.GPU) (*Agent, context.Context) {
	fc := newFakeController(b)
	a, err := New(Config{
		Name: "n1", StateDir: filepath.Join(base, "state"), Hostname: "n1", Version: "bench",
		Inventory: spec.Inventory{CPUs: 128, MemMiB: 1 << 20, GPUs: gpus},
		KillGrace: time.Second, HeartbeatInterval: time.Second, PollWait: time.Second,
		SysfsRoot: filepath.Join(base, "sysfs"),
	}, fc.Client, rt, WithLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(a.cfg.jobsDir(), 0o711); err != nil {
		b.Fatal(err)
	}
	// As Run: jobs/ open for the whole run.
	if a.jobs, err = safefs.OpenDir(a.cfg.jobsDir()); err != nil {
		b.Fatal(err)
	}
	if a.ckpt, err = checkpoint.New(a.cfg.CheckpointRoot, 2); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopSteps := a.steps.Run(ctx)
	b.Cleanup(func() {
		cancel() // the runners return, containers still running left so
		a.runnerWG.Wait()
		stopSteps()
		a.jobs.Close()
	})
	if a.ob, err = openMemoryOutbox(ctx); err != nil {
		b.Fatal(err)
	}
	return a, ctx
}

// benchJobIDs are the uid and gid the benchmarks' jobs run as: nobody's
// when the benchmark runs as root (as a node's jobs never run as root).
func benchJobIDs() (uid, gid int) {
	if os.Geteuid() == 0 {
		return 65534, 65534
	}
	return os.Getuid(), os.Getgid()
}

// processCPU is this process's CPU time so far (user and system, every
// goroutine's): steadier than wall time on a loaded machine.
func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
