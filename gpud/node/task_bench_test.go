package node

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// BenchmarkBuildTask is one job's container config as a runner builds it:
// a one-GPU batch job on the host's root with the node's state hidden,
// each in a goroutine of its own, as each job's runner is (a goroutine's
// stack starts small; a deep or wide call chain grows it, copied, per
// job).
func BenchmarkBuildTask(b *testing.B) {
	base := b.TempDir()
	state := filepath.Join(base, "state")
	jobDir := filepath.Join(state, "jobs", "gpud-7-1-n1")
	work := filepath.Join(base, "work")
	for _, d := range []string{jobDir, work, filepath.Join(state, "checkpoints")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	const uuid = "GPU-0000"
	self := spec.NodeAlloc{Node: "n1", CPUs: 8, MemMiB: 65536, GPUs: []string{uuid}}
	asg := api.Assignment{
		Job: spec.Job{ID: 7, UID: 1000, GID: 1000, User: "alice", JobSpec: spec.JobSpec{
			Name: "train", Partition: "gpu", Script: "#!/bin/sh\ntrue\n", WorkDir: work, SubmitDir: work,
			Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/alice", "LOADTEST_RUN_MS=1000"}}},
		Alloc: spec.Alloc{ID: "a7", JobID: 7, Attempt: 1, Nodes: []spec.NodeAlloc{self}},
	}
	in := taskInput{
		Asg: &asg, Self: self, NodeName: "n1", Hostname: "n1", SelfAddr: "10.0.0.1", DefaultImage: runtime.ImageHost,
		GPUs: map[string]spec.GPU{uuid: {UUID: uuid, MemMiB: 81559}}, ContainerID: "gpud-7-1-n1", JobDir: jobDir,
		ScriptPath: filepath.Join(jobDir, "script"), CkptDir: filepath.Join(state, "checkpoints", "7"),
		Hide: []string{state}, Home: base,
	}
	done := make(chan error)
	b.ReportAllocs()
	for b.Loop() {
		go func() {
			_, err := buildTask(&in)
			done <- err
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJobFiles is what a runner does on the node's filesystem for
// one job besides its container: the job directory made (tmp/ and the
// script, through descriptors), the checkpoint directory readied (rank 0:
// a fresh staging directory, the user's, and the newest checkpoint to
// restart from), then at the end the job directory removed and the
// job's checkpoints with it. cpu-ns/op is the process's CPU time
// (getrusage), steadier than ns/op on a loaded machine.
func BenchmarkJobFiles(b *testing.B) {
	// On tmpfs where there is one (as the loadtest's agents are): on a
	// disk the fsyncs of the new directories and the script dominate.
	base, err := os.MkdirTemp("/dev/shm", "jobfiles-")
	if err != nil {
		base = b.TempDir()
	} else {
		b.Cleanup(func() { os.RemoveAll(base) })
	}
	cfg := Config{StateDir: filepath.Join(base, "state")}
	if err := os.MkdirAll(cfg.jobsDir(), 0o711); err != nil {
		b.Fatal(err)
	}
	store, err := checkpoint.New(filepath.Join(base, "ckpt"), 2)
	if err != nil {
		b.Fatal(err)
	}
	d := &runnerDeps{cfg: cfg, ckpt: store, log: slog.New(slog.DiscardHandler)}
	uid, gid := benchJobIDs()
	script := []byte("#!/bin/sh\ntrue\n")
	cpu0 := processCPU()
	id := 0
	for b.Loop() {
		id++
		asg := &api.Assignment{Job: spec.Job{ID: spec.JobID(id), UID: uint32(uid), GID: uint32(gid)}}
		r := &runner{d: d, id: fmt.Sprintf("gpud-%d-1-n1", id), jobID: spec.JobID(id), asg: asg}
		jobs, done, err := d.openJobs()
		if err != nil {
			b.Fatal(err)
		}
		if err = makeJobDir(jobs, r.id, script, uid, gid); err != nil {
			b.Fatal(err)
		}
		r.madeDir = true
		done()
		if _, restart, err := r.prepareCheckpoints(uint32(uid), uint32(gid)); err != nil || restart != "" {
			b.Fatal(err, restart)
		}
		r.removeJobDir(d.log)
		if err := store.Remove(r.jobID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
