package node

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

const cid = "gpud-7-1-node-1" // ContainerID(7, 1, "node-1")

func started(alloc string, job spec.JobID) api.AllocEvent {
	return api.AllocEvent{Node: "node-1", AllocID: alloc, JobID: job, Kind: api.EventStarted, Time: spec.NewTime(t0)}
}

func exited(alloc string, job spec.JobID, state spec.JobState, code int, sig syscall.Signal, reason string) api.AllocEvent {
	return api.AllocEvent{Node: "node-1", AllocID: alloc, JobID: job, Kind: api.EventExited, Time: spec.NewTime(t0),
		State: state, ExitCode: code, Signal: int(sig), Reason: reason}
}

func TestStartBuildsTaskConfig(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(7, e.home)
	a.Job.Account, a.Job.QOS, a.Job.SubmitHost, a.ClusterName = "ml", "normal", "login1", "gpu-cluster"
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "started event", func() bool { return len(e.fc.Events()) == 1 }, e.on()...)

	jobDir := filepath.Join(e.dir, "jobs", cid)
	ckpt := filepath.Join(e.dir, "checkpoints", "7")
	work := filepath.Join(e.home, "work")
	want := runtime.TaskConfig{
		ID: cid,
		Labels: map[string]string{
			LabelNode: "node-1", LabelJob: "7", LabelAlloc: "a7", LabelUser: "alice",
			LabelStart: "2025-03-04T05:06:07Z", LabelDeadline: "2025-03-04T06:06:07Z",
		},
		Image: runtime.ImageHost,
		// node-1 is rank 1: it holds its share for steps and the script
		// runs on rank 0 only (TestBatchOnFirstNode), whether or not
		// steps can reach node-0 (no Peers, no step listener here).
		Args: []string{"/bin/sh", "-c", step.HolderScript},
		Env: []string{
			"FOO=baz",
			"GPUD_JOB_ID=7", "GPUD_NODELIST=node-0,node-1", "GPUD_NODEID=1", "GPUD_NNODES=2",
			"GPUD_GPUS=GPU-a,GPU-b", "GPUD_CHECKPOINT_DIR=" + filepath.Join(ckpt, "staging"), "GPUD_RESTART_DIR=", "GPUD_IMAGE=host",
			"MASTER_ADDR=10.0.0.1", "MASTER_PORT=20007", "WORLD_SIZE=2", "NODE_RANK=1",
			"SLURM_JOB_ID=7", "SLURM_JOBID=7", "SLURM_JOB_NODELIST=node-[0-1]", "SLURM_NODELIST=node-[0-1]", "SLURM_NODEID=1", "SLURM_NNODES=2",
			"SLURM_JOB_NUM_NODES=2", "SLURM_SUBMIT_DIR=" + filepath.Join(e.home, "submit"), "SLURM_JOB_NAME=train",
			"SLURM_JOB_USER=alice", "SLURM_JOB_PARTITION=gpu", "SLURM_CPUS_ON_NODE=4", "SLURM_JOB_CPUS_PER_NODE=4(x2)", "SLURM_MEM_PER_NODE=8192", "SLURM_RESTART_COUNT=0",
			"CUDA_VISIBLE_DEVICES=0,1", "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b",
			"SLURMD_NODENAME=node-1", "SLURM_GPUS_ON_NODE=2", "GPUD_STEP_SOCKET=" + filepath.Join(jobDir, "step.sock"),
			"SLURM_JOB_ACCOUNT=ml", "SLURM_JOB_QOS=normal", "SLURM_JOB_UID=1000", "SLURM_JOB_GID=1000",
			"SLURM_TOPOLOGY_ADDR=node-1", "SLURM_TOPOLOGY_ADDR_PATTERN=node", "SLURM_CLUSTER_NAME=gpu-cluster", "SLURM_SUBMIT_HOST=login1",
			"SLURM_JOB_GPUS=0,1", "SLURM_TASKS_PER_NODE=4(x2)",
		},
		Cwd: work, UID: 1000, GID: 1000,
		Hostname: "node-1.test",
		Mounts: []runtime.Mount{
			{Dest: e.dir, Hide: true}, // the state dir, checkpoints inside
			{Source: work, Dest: work},
			{Source: filepath.Join(e.home, "submit"), Dest: filepath.Join(e.home, "submit")},
			{Source: jobDir, Dest: jobDir},
			{Source: filepath.Join(jobDir, "tmp"), Dest: "/tmp"},
			// No output directory: a holder writes no output file.
			{Source: ckpt, Dest: ckpt},
		},
		CPUs: 4, MemoryBytes: 8192 << 20,
		CDIDevices: []string{"nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-b"},
	}
	if h := homeDir(1000); h != "" {
		// uid 1000's home on this host, bound read-write after the hidden
		// state (TestBuildTaskHome covers the bind itself).
		want.Mounts = slices.Insert(want.Mounts, 1, runtime.Mount{Source: h, Dest: h})
	}
	got, _ := e.rt.Config(cid)
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("TaskConfig (-want +got):\n%s", diff)
	}

	script, err := os.ReadFile(filepath.Join(jobDir, "script"))
	if err != nil || string(script) != a.Job.Script {
		t.Errorf("script = %q, %v; want %q", script, err, a.Job.Script)
	}
	// The job's user gets the script and tmp/; the directory stays root's,
	// so the user can never swap an entry root or the runtime uses.
	for path, want := range map[string]struct {
		mode os.FileMode
		uid  uint32
	}{
		filepath.Join(jobDir, "script"): {0o700, 1000},
		filepath.Join(jobDir, "tmp"):    {os.ModeDir | 0o700, 1000},
		jobDir:                          {os.ModeDir | 0o711, 0},
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want.mode {
			t.Errorf("%s mode = %v, want %v", path, fi.Mode(), want.mode)
		}
		if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (st.Uid != want.uid || st.Gid != want.uid) {
			t.Errorf("%s owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, want.uid, want.uid)
		}
	}
	if diff := cmp.Diff([]api.AllocEvent{started("a7", 7)}, e.eventsOf("a7")); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	wantJobs := []RunningJob{{JobID: 7, AllocID: "a7", User: "alice", Account: a.Job.Account, GPUs: []string{"GPU-a", "GPU-b"},
		Attempt: 1, Start: t0}}
	if diff := cmp.Diff(wantJobs, e.agent.RunningJobs()); diff != "" {
		t.Errorf("RunningJobs (-want +got):\n%s", diff)
	}
	reg := e.fc.Registered()
	if len(reg) == 0 || reg[0].Name != "node-1" || reg[0].Addr != "10.0.0.2" || len(reg[0].GPUs) != 3 {
		t.Errorf("registered inventory = %+v, want node-1 at 10.0.0.2 with 3 GPUs", reg)
	}
	waitFor(t, "a heartbeat listing a7", func() bool {
		for _, hb := range e.fc.Heartbeats() {
			if slices.Equal(hb.Running, []string{"a7"}) {
				return true
			}
		}
		return false
	}, e.on()...)
}

func TestStartWithoutGPUsOrShebang(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(7, e.home)
	a.Job.Script = "echo no shebang\n"
	a.Job.Image = "docker.io/library/busybox:latest"
	a.Job.Error = "/abs/err-%j.txt"
	a.Alloc.Nodes[0].GPUs = nil
	a.Alloc.Nodes = a.Alloc.Nodes[:1] // single node, rank 1 is all there is
	a.Alloc.Nodes[0].Rank = 0
	e.fc.Set(a)
	e.waitStarted(t, cid)
	got, _ := e.rt.Config(cid)
	env := map[string]string{}
	for _, kv := range got.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, want := range map[string]string{
		"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void", "GPUD_GPUS": "",
		"MASTER_ADDR": "10.0.0.2", "NODE_RANK": "0", "WORLD_SIZE": "1", "GPUD_NODELIST": "node-1",
	} {
		if v, ok := env[k]; !ok || v != want {
			t.Errorf("env %s = %q (set %v), want %q", k, v, ok, want)
		}
	}
	jobDir := filepath.Join(e.dir, "jobs", cid)
	if diff := cmp.Diff([]string{"/bin/sh", filepath.Join(jobDir, "script"), "--lr", "0.1"}, got.Args); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
	if got.Image != a.Job.Image || len(got.CDIDevices) != 0 || got.StderrPath != "/abs/err-7.txt" ||
		got.StdoutPath != filepath.Join(e.home, "work", "logs", "train-7.out") {
		t.Errorf("image %q, CDI %v, stdout %q, stderr %q", got.Image, got.CDIDevices, got.StdoutPath, got.StderrPath)
	}
	if !slices.Contains(got.Mounts, runtime.Mount{Source: "/abs", Dest: "/abs"}) {
		t.Errorf("mounts %v lack the error file's directory /abs", got.Mounts)
	}
}

func TestExitStates(t *testing.T) {
	tests := []struct {
		name        string
		script      fake.Script
		wantEvents  []api.AllocEvent
		wantStarted bool
	}{
		{"exit 0 completes", fake.Script{ExitAtOnce: true},
			[]api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateCompleted, 0, 0, "")}, true},
		{"exit 3 fails", fake.Script{ExitAtOnce: true, Exit: runtime.ExitStatus{Code: 3}},
			[]api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateFailed, 3, 0, "NonZeroExitCode")}, true},
		{"signal fails", fake.Script{ExitAtOnce: true, Exit: runtime.ExitStatus{Code: 139, Signal: syscall.SIGSEGV}},
			[]api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateFailed, 139, syscall.SIGSEGV, "killed by signal SIGSEGV")}, true},
		{"oom", fake.Script{ExitAtOnce: true, Exit: runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL, OOMKilled: true}},
			[]api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateOutOfMemory, 137, syscall.SIGKILL, "out of memory: the job exceeded its memory limit")}, true},
		{"start error", fake.Script{StartErr: errors.New(`image "nope:1" not found`)},
			[]api.AllocEvent{exited("a7", 7, spec.StateFailed, 1, 0,
				`start job 7 on node node-1: start container gpud-7-1-node-1: image "nope:1" not found`)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(e *env) { e.rt.SetScript(cid, tc.script) })
			e.fc.Set(asg(7, e.home))
			e.waitExited(t, "a7")
			if diff := cmp.Diff(tc.wantEvents, e.eventsOf("a7")); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			e.waitGone(t, cid)
			if got := len(e.rt.Starts()); got != map[bool]int{true: 1, false: 0}[tc.wantStarted] {
				t.Errorf("starts = %d, want started %v", got, tc.wantStarted)
			}
			// The controller keeps sending the finished assignment until
			// it applies the exit: the agent must not run it again.
			e.setAndWait(t, asg(7, e.home))
			e.setAndWait(t, asg(7, e.home))
			if got := len(e.rt.Starts()) + e.rt.StartErrors(); got != 1 {
				t.Errorf("start attempts = %d, want 1", got)
			}
		})
	}
}

// TestTimeLimitOnTheNodesClock: the controller's clock is an hour behind
// this node's (or the node's was stepped an hour forward): the job's start,
// stamped on the controller's clock, is an hour in the node's past, yet the
// job gets its whole hour, measured on the node's clock from when the
// controller says it started (before, it was timed out at once).
func TestTimeLimitOnTheNodesClock(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(7, e.home)
	a.Alloc.StartTime = spec.NewTime(t0.Add(-time.Hour).Add(-time.Second)) // a second before the controller's now
	e.fc.mu.Lock()
	e.fc.now = t0.Add(-time.Hour)
	e.fc.mu.Unlock()
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(time.Hour - 2*time.Second)
	if got := e.rt.Signals(cid); len(got) != 0 {
		t.Fatalf("signals before the hour: %v", got)
	}
	e.clock.Advance(time.Second)
	waitFor(t, "SIGTERM at the hour", func() bool { return len(e.rt.Signals(cid)) == 1 }, e.on()...)
}

func TestTimeLimit(t *testing.T) {
	tests := []struct {
		name        string
		script      fake.Script
		wantSignals []syscall.Signal
		want        api.AllocEvent
	}{
		{"exits on SIGTERM", fake.Script{}, []syscall.Signal{syscall.SIGTERM},
			exited("a7", 7, spec.StateTimeout, 143, syscall.SIGTERM, "time limit 1h0m0s reached")},
		{"ignores SIGTERM, killed", fake.Script{IgnoreSIGTERM: true}, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL},
			exited("a7", 7, spec.StateTimeout, 137, syscall.SIGKILL, "time limit 1h0m0s reached")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(e *env) { e.rt.SetScript(cid, tc.script) })
			e.fc.Set(asg(7, e.home))
			e.waitStarted(t, cid)
			waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
			e.clock.Advance(time.Hour - time.Second)
			if got := e.rt.Signals(cid); len(got) != 0 {
				t.Fatalf("signals before the deadline: %v", got)
			}
			e.clock.Advance(time.Second)
			waitFor(t, "SIGTERM and grace timer", func() bool {
				return len(e.rt.Signals(cid)) == 1 && e.clock.Waiters() == 1
			}, e.on()...)
			if len(tc.wantSignals) > 1 {
				e.clock.Advance(time.Second) // KillGrace
			}
			got := e.waitExited(t, "a7")
			got.Seq = 0
			want := tc.want
			// The task exits at the deadline on SIGTERM, or a kill grace
			// later on SIGKILL.
			want.Time = spec.NewTime(t0.Add(time.Hour + time.Second*time.Duration(len(tc.wantSignals)-1)))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("exited (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSignals, e.rt.Signals(cid)); diff != "" {
				t.Errorf("signals (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStop(t *testing.T) {
	t.Run("running job is cancelled", func(t *testing.T) {
		e := newEnv(t, nil)
		a := asg(7, e.home)
		e.fc.Set(a)
		e.waitStarted(t, cid)
		a.Stop, a.StopState, a.StopReason = true, spec.StateCancelled, "cancelled by alice"
		e.fc.Set(a)
		e.waitExited(t, "a7")
		want := []api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateCancelled, 143, syscall.SIGTERM, "cancelled by alice")}
		if diff := cmp.Diff(want, e.eventsOf("a7")); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
	t.Run("preempted job that ignores SIGTERM", func(t *testing.T) {
		e := newEnv(t, func(e *env) { e.rt.SetScript(cid, fake.Script{IgnoreSIGTERM: true}) })
		a := asg(7, e.home)
		e.fc.Set(a)
		e.waitStarted(t, cid)
		waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
		a.Stop, a.StopState, a.StopReason = true, spec.StatePreempted, "preempted by job 9"
		e.fc.Set(a)
		waitFor(t, "SIGTERM and grace timer", func() bool {
			return len(e.rt.Signals(cid)) == 1 && e.clock.Waiters() == 2
		}, e.on()...)
		e.clock.Advance(time.Second)
		got := e.waitExited(t, "a7")
		got.Seq = 0
		want := exited("a7", 7, spec.StatePreempted, 137, syscall.SIGKILL, "preempted by job 9")
		want.Time = spec.NewTime(t0.Add(time.Second))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("exited (-want +got):\n%s", diff)
		}
	})
	t.Run("never started here", func(t *testing.T) {
		e := newEnv(t, nil)
		a := asg(7, e.home)
		a.Stop, a.StopState, a.StopReason = true, spec.StateRequeued, "requeued by admin"
		e.fc.Set(a)
		e.waitExited(t, "a7")
		if diff := cmp.Diff([]api.AllocEvent{exited("a7", 7, spec.StateRequeued, 0, 0, "requeued by admin")}, e.eventsOf("a7")); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if n := len(e.rt.Starts()); n != 0 {
			t.Errorf("starts = %d, want 0", n)
		}
	})
}

// planted is a container an earlier agent process left behind.
func planted(id, node, alloc, job, deadline string) runtime.TaskConfig {
	return runtime.TaskConfig{ID: id, Labels: map[string]string{
		LabelNode: node, LabelAlloc: alloc, LabelJob: job, LabelUser: "alice",
		LabelStart: t0.Format(time.RFC3339), LabelDeadline: deadline,
	}}
}

func TestFencing(t *testing.T) {
	e := newEnv(t, func(e *env) {
		e.fc.Fail(epAssignments, true)
		for _, c := range []runtime.TaskConfig{
			planted("gpud-5-1-node-1", "node-1", "a5", "5", ""),
			planted("gpud-6-1-node-2", "node-2", "a6", "6", ""),
		} {
			if err := e.rt.Add(c, runtime.StatusRunning, runtime.ExitStatus{}); err != nil {
				t.Fatal(err)
			}
		}
	})
	// While the controller cannot say what it wants, nothing is killed.
	waitFor(t, "failed assignment polls", func() bool { return e.fc.Calls(epAssignments) >= 3 }, e.on()...)
	if got := e.rt.Signals("gpud-5-1-node-1"); len(got) != 0 {
		t.Fatalf("signals before the first assignments answer: %v", got)
	}
	e.fc.Fail(epAssignments, false)
	e.fc.Set() // a5 is no longer assigned here
	got := e.waitExited(t, "a5")
	if got.State != spec.StateCancelled || !strings.HasPrefix(got.Reason, "fenced: ") {
		t.Errorf("exited = %+v, want CANCELLED fenced", got)
	}
	waitFor(t, "fenced container deleted", func() bool {
		_, ok := e.rt.Status("gpud-5-1-node-1")
		return !ok
	}, e.on()...)
	// Another agent's container is never touched.
	if st, ok := e.rt.Status("gpud-6-1-node-2"); !ok || st != runtime.StatusRunning || len(e.rt.Signals("gpud-6-1-node-2")) != 0 {
		t.Errorf("node-2's container: status %q exists %v signals %v", st, ok, e.rt.Signals("gpud-6-1-node-2"))
	}
}

func TestEventsSurviveUnreachableController(t *testing.T) {
	e := newEnv(t, func(e *env) { e.fc.Fail(epEvents, true) })
	e.fc.Set(asg(7, e.home), asg(8, e.home))
	e.waitStarted(t, "gpud-8-1-node-1")
	e.waitStarted(t, cid)
	e.rt.Exit(cid, runtime.ExitStatus{Code: 0})
	e.rt.Exit("gpud-8-1-node-1", runtime.ExitStatus{Code: 2})
	waitFor(t, "both containers deleted after their exits were committed", func() bool {
		return len(e.rt.Deletes()) == 2
	}, e.on()...)
	waitFor(t, "several failed deliveries", func() bool { return e.fc.Calls(epEvents) >= 3 }, e.on()...)
	if got := e.fc.Events(); len(got) != 0 {
		t.Fatalf("events delivered while failing: %v", got)
	}
	e.fc.Fail(epEvents, false)
	waitFor(t, "four events", func() bool { return len(e.fc.Events()) == 4 }, e.on()...)
	evs := e.fc.Events()
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Errorf("event %d has seq %d, want %d (in order, none lost)", i, ev.Seq, i+1)
		}
	}
	if diff := cmp.Diff([]api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateCompleted, 0, 0, "")}, e.eventsOf("a7")); diff != "" {
		t.Errorf("a7 events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]api.AllocEvent{started("a8", 8), exited("a8", 8, spec.StateFailed, 2, 0, "NonZeroExitCode")}, e.eventsOf("a8")); diff != "" {
		t.Errorf("a8 events (-want +got):\n%s", diff)
	}
	waitFor(t, "outbox emptied by the ack", func() bool {
		p, err := e.agent.ob.pending(t.Context(), 10)
		return err == nil && len(p) == 0
	}, e.on()...)
}

func TestRecovery(t *testing.T) {
	deadline := t0.Add(time.Hour).Format(time.RFC3339)
	e := newEnv(t, func(e *env) {
		// Stale job dir of a start that never happened.
		if err := os.MkdirAll(filepath.Join(e.dir, "jobs", "gpud-1-1-node-1"), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			cfg    runtime.TaskConfig
			status runtime.TaskStatus
			exit   runtime.ExitStatus
		}{
			{planted("gpud-3-1-node-1", "node-1", "a3", "3", ""), runtime.StatusExited, runtime.ExitStatus{Code: 7, ExitedAt: t0.Add(-time.Minute)}},
			{planted("gpud-4-1-node-1", "node-1", "a4", "4", deadline), runtime.StatusRunning, runtime.ExitStatus{}},
			{planted("gpud-9-1-node-2", "node-2", "a9", "9", ""), runtime.StatusExited, runtime.ExitStatus{Code: 1}},
			// SIGKILLed while the agent was down, start never recorded:
			// containerd killed a task it was creating when it died.
			{planted("gpud-5-1-node-1", "node-1", "a5", "5", ""), runtime.StatusExited, runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL, ExitedAt: t0.Add(-time.Minute)}},
		} {
			if err := e.rt.Add(p.cfg, p.status, p.exit); err != nil {
				t.Fatal(err)
			}
		}
	})
	e.fc.Set(asg(4, e.home))
	// The exit that happened while the agent was down is reported.
	got := e.waitExited(t, "a3")
	got.Seq = 0
	want := exited("a3", 3, spec.StateFailed, 7, 0, "NonZeroExitCode")
	want.Time = spec.NewTime(t0.Add(-time.Minute))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a3 exited (-want +got):\n%s", diff)
	}
	if got := e.waitExited(t, "a5"); got.State != spec.StateNodeFail {
		t.Errorf("a5 exited = %+v, want NODE_FAIL (the runtime killed it, not the job)", got)
	}
	waitFor(t, "a3 deleted, stale dir removed", func() bool {
		_, ok := e.rt.Status("gpud-3-1-node-1")
		_, err := os.Stat(filepath.Join(e.dir, "jobs", "gpud-1-1-node-1"))
		return !ok && errors.Is(err, os.ErrNotExist)
	}, e.on()...)
	if _, ok := e.rt.Status("gpud-9-1-node-2"); !ok {
		t.Error("node-2's exited container was deleted by node-1")
	}
	// The running one is re-adopted, not restarted, and keeps its deadline.
	waitFor(t, "a4 re-adopted", func() bool { return len(e.eventsOf("a4")) == 1 && e.clock.Waiters() == 1 }, e.on()...)
	if n := len(e.rt.Starts()); n != 0 {
		t.Errorf("starts = %d, want 0 (re-adopted, not started)", n)
	}
	e.clock.Advance(time.Hour)
	got = e.waitExited(t, "a4")
	if got.State != spec.StateTimeout || got.Signal != int(syscall.SIGTERM) {
		t.Errorf("a4 exited = %+v, want TIMEOUT by SIGTERM", got)
	}
}

func TestRestartAgent(t *testing.T) {
	e := newEnv(t, nil)
	e.fc.Set(asg(7, e.home), asg(8, e.home))
	e.waitStarted(t, cid)
	e.waitStarted(t, "gpud-8-1-node-1")
	e.rt.Exit("gpud-8-1-node-1", runtime.ExitStatus{})
	waitFor(t, "a8 reported", func() bool { return len(e.eventsOf("a8")) == 2 }, e.on()...)
	e.fc.Fail(epEvents, true)
	e.stop()
	// Shutdown is not kill.
	if st, _ := e.rt.Status(cid); st != runtime.StatusRunning || len(e.rt.Signals(cid)) != 0 {
		t.Fatalf("after agent stop: status %q, signals %v; want running, none", st, e.rt.Signals(cid))
	}
	e.rt.Exit(cid, runtime.ExitStatus{Code: 4}) // while the agent is down

	e.start(t)
	waitFor(t, "a7 exit committed and container deleted", func() bool {
		_, ok := e.rt.Status(cid)
		return !ok
	}, e.on()...)
	e.fc.Fail(epEvents, false)
	e.waitExited(t, "a7")
	want := []api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateFailed, 4, 0, "NonZeroExitCode")}
	if diff := cmp.Diff(want, e.eventsOf("a7")); diff != "" {
		t.Errorf("a7 events (-want +got):\n%s", diff)
	}
	// Both allocations are still assigned (the controller has not caught
	// up); neither runs again.
	e.setAndWait(t, asg(7, e.home), asg(8, e.home))
	if n := len(e.rt.Starts()); n != 2 {
		t.Errorf("starts = %d, want 2", n)
	}
	if n := len(e.eventsOf("a8")); n != 2 {
		t.Errorf("a8 events = %d, want 2 (no duplicates after restart)", n)
	}
}

func TestSignalDeliveredOnce(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(7, e.home)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	a.Signal, a.SignalSeq = "SIGUSR1", 1
	e.fc.Set(a)
	waitFor(t, "SIGUSR1", func() bool { return len(e.rt.Signals(cid)) == 1 }, e.on()...)
	e.setAndWait(t, a)
	if n := len(e.rt.Signals(cid)); n != 1 {
		t.Errorf("signals after a repeated request = %d, want 1", n)
	}
	a.SignalSeq = 2
	e.fc.Set(a)
	waitFor(t, "second SIGUSR1", func() bool { return len(e.rt.Signals(cid)) == 2 }, e.on()...)
	if diff := cmp.Diff([]syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR1}, e.rt.Signals(cid)); diff != "" {
		t.Errorf("signals (-want +got):\n%s", diff)
	}
}

func TestStuckJobKeepsItsAllocation(t *testing.T) {
	e := newEnv(t, func(e *env) { e.rt.SetScript(cid, fake.Script{HangOnStop: true}) })
	a := asg(7, e.home)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	a.Stop, a.StopState, a.StopReason = true, spec.StateCancelled, "cancelled by alice"
	e.fc.Set(a)
	waitFor(t, "SIGTERM and grace timer", func() bool { return len(e.rt.Signals(cid)) == 1 && e.clock.Waiters() == 2 }, e.on()...)
	e.clock.Advance(time.Second)
	waitFor(t, "SIGKILL and stuck timer", func() bool { return len(e.rt.Signals(cid)) == 2 && e.clock.Waiters() == 2 }, e.on()...)
	e.clock.Advance(time.Second)
	waitFor(t, "stuck timer fired", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	// The processes survived SIGKILL: the allocation is still held.
	if diff := cmp.Diff([]string{"a7"}, e.agent.Running()); diff != "" {
		t.Errorf("Running (-want +got):\n%s", diff)
	}
	waitFor(t, "started event", func() bool { return len(e.eventsOf("a7")) >= 1 }, e.on()...)
	if evs := e.eventsOf("a7"); len(evs) != 1 {
		t.Errorf("events = %v, want only started", evs)
	}
	e.rt.Exit(cid, runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL})
	if got := e.waitExited(t, "a7"); got.State != spec.StateCancelled {
		t.Errorf("exited = %+v, want CANCELLED", got)
	}
}

// TestReconnectDeliversAtOnce: after the controller was unreachable long
// enough for the event sender to back off far, the first heartbeat that
// gets through makes it deliver at once, not a backoff later.
func TestReconnectDeliversAtOnce(t *testing.T) {
	e := newEnv(t, func(e *env) {
		e.opts = []Option{WithRetryBackoff(time.Hour, time.Hour)}
		e.fc.Fail(epEvents, true)
		e.fc.Fail(epHeartbeat, true)
	})
	e.fc.Set(asg(7, e.home))
	e.waitStarted(t, cid)
	waitFor(t, "a failed delivery and heartbeat", func() bool {
		return e.fc.Calls(epEvents) >= 1 && e.fc.Calls(epHeartbeat) >= 1
	}, e.on()...)
	e.fc.Fail(epEvents, false)
	e.fc.Fail(epHeartbeat, false)
	waitFor(t, "started event delivered after the reconnect", func() bool { return len(e.eventsOf("a7")) == 1 }, e.on()...)
}

// TestOverTimeLimit: with the site's OverTimeLimit a job runs that much
// past its time limit before it is stopped (then TIMEOUT, for its limit,
// as in Slurm); a job ending within it is not stopped at all.
func TestOverTimeLimit(t *testing.T) {
	e := newEnv(t, func(e *env) {
		e.cfgExtra = func(c *Config) { c.OverTimeLimit = 2 * time.Minute }
	})
	e.fc.Set(asg(7, e.home))
	e.waitStarted(t, cid)
	waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.mu.Lock()
	at := e.clock.waiters[0].at
	e.clock.mu.Unlock()
	if want := t0.Add(time.Hour + 2*time.Minute); !at.Equal(want) {
		t.Fatalf("the job is stopped at %s, want its hour's limit and 2 minutes over, %s", at, want)
	}
	e.clock.Advance(time.Hour + 2*time.Minute)
	got := e.waitExited(t, "a7")
	if got.State != spec.StateTimeout || got.Reason != "time limit 1h0m0s reached" {
		t.Errorf("exited %s (%q), want TIMEOUT for the time limit", got.State, got.Reason)
	}
	if diff := cmp.Diff([]syscall.Signal{syscall.SIGTERM}, e.rt.Signals(cid)); diff != "" {
		t.Errorf("signals (-want +got):\n%s", diff)
	}
}

// TestAllocOfAnotherJobUnderSameIDRuns: a controller whose state was
// reset (a new state.db) numbers its jobs from 1 again, so it assigns a
// new job under an allocation ID this node's outbox holds as ended (it
// keeps ended allocations a week). The job's submit time tells them
// apart: the new job runs (the loadtest lost every job so when a second
// run reused the agents' state directories), while the ended one, listed
// again until the controller applies its exit, does not run again,
// before and after an agent restart.
func TestAllocOfAnotherJobUnderSameIDRuns(t *testing.T) {
	e := newEnv(t, nil)
	old := asg(7, e.home)
	old.Job.SubmitTime = spec.NewTime(t0.Add(-time.Hour))
	e.fc.Set(old)
	e.waitStarted(t, cid)
	e.rt.Exit(cid, runtime.ExitStatus{})
	e.waitExited(t, "a7")
	waitFor(t, "a7's container deleted", func() bool { _, ok := e.rt.Status(cid); return !ok }, e.on()...)
	e.setAndWait(t, old)
	if n := len(e.rt.Starts()); n != 1 {
		t.Fatalf("starts = %d after the ended allocation was listed again, want 1", n)
	}

	// The controller's state is reset: job 7 is another job.
	renewed := asg(7, e.home)
	renewed.Job.SubmitTime = spec.NewTime(t0)
	e.fc.Set(renewed)
	waitFor(t, "the new job 7 started", func() bool { return len(e.rt.Starts()) == 2 }, e.on()...)
	e.waitStarted(t, cid)
	e.rt.Exit(cid, runtime.ExitStatus{Code: 3})
	waitFor(t, "the new job's exit", func() bool {
		evs := e.eventsOf("a7")
		return len(evs) == 4 && evs[3].Kind == api.EventExited && evs[3].ExitCode == 3
	}, e.on()...)
	waitFor(t, "a7's container deleted", func() bool { _, ok := e.rt.Status(cid); return !ok }, e.on()...)

	// After a restart (the outbox read back from outbox.db): the ended
	// one is not run again; a third job under the ID is.
	e.stop()
	e.start(t)
	e.setAndWait(t, renewed)
	if n := len(e.rt.Starts()); n != 2 {
		t.Fatalf("starts = %d after a restart with the ended allocation listed again, want 2", n)
	}
	third := asg(7, e.home)
	third.Job.SubmitTime = spec.NewTime(t0.Add(time.Hour))
	e.fc.Set(third)
	waitFor(t, "the third job 7 started", func() bool { return len(e.rt.Starts()) == 3 }, e.on()...)
}
