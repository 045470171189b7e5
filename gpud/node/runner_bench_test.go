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
	"github.com/gpud/gpud/runtime/fake"
	"github.com/gpud/gpud/runtime/safefs"
)

// BenchmarkRunnerJob is one job through a node agent's runner, start to
// reported exit, as gpud loadtest's agents run them: a one-GPU batch job
// on the host's root (the loadtest's job: a two-line script, output to
// /dev/null) whose fake container exits at once. Each job's runner does
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
	fc := newFakeController(b)
	const uuid = "GPU-0000"
	a, err := New(Config{
		Name: "n1", StateDir: filepath.Join(base, "state"), Hostname: "n1", Version: "bench",
		Inventory: spec.Inventory{CPUs: 128, MemMiB: 1 << 20, GPUs: []spec.GPU{{UUID: uuid, MemMiB: 81559}}},
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
	defer a.jobs.Close()
	if a.ckpt, err = checkpoint.New(a.cfg.CheckpointRoot, 2); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSteps := a.steps.Run(ctx)
	defer stopSteps()
	if a.ob, err = openMemoryOutbox(ctx); err != nil {
		b.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534
	}
	self := spec.NodeAlloc{Node: "n1", CPUs: 1, MemMiB: 1024, GPUs: []string{uuid}}
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	id := 0
	b.ReportAllocs()
	for b.Loop() {
		id++
		jid := spec.JobID(id)
		asg := &api.Assignment{
			Job: spec.Job{ID: jid, UID: uint32(uid), GID: uint32(gid), User: "lt", Attempt: 1, JobSpec: spec.JobSpec{
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
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if _, err := os.Stat(filepath.Join(a.cfg.jobsDir(), ContainerID(spec.JobID(id), 1, "n1"))); !os.IsNotExist(err) {
		b.Fatalf("the last job's directory is still there: %v", err)
	}
}
