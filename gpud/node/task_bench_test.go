package node

import (
	"os"
	"path/filepath"
	"testing"

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
		Asg: asg, Self: self, NodeName: "n1", Hostname: "n1", SelfAddr: "10.0.0.1", DefaultImage: runtime.ImageHost,
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
