package containerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

const nobody = 65534

func newRuntime(t *testing.T, address string, cdiDirs ...string) *containerd.Runtime {
	t.Helper()
	rt, err := containerd.New(context.Background(), containerd.Options{Address: address, CDISpecDirs: cdiDirs})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// jobDir returns a directory of the nobody user, as a submit dir is its
// user's (t.TempDir's parents are 0700, which a non-root job cannot
// traverse, and output files are created by the job's user).
func jobDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpudjob")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return dir
}

var idUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

func testID(t *testing.T) string {
	return strings.Trim(idUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
}

func hostTask(t *testing.T, dir string, args ...string) runtime.TaskConfig {
	return runtime.TaskConfig{
		ID:         testID(t),
		Labels:     map[string]string{"gpud.job": "42", "gpud.node": "n1"},
		Image:      runtime.ImageHost,
		Args:       args,
		Env:        []string{"PATH=/usr/bin:/bin"},
		Cwd:        dir,
		UID:        nobody,
		GID:        nobody,
		Hostname:   "job42",
		StdoutPath: filepath.Join(dir, "out"),
		StderrPath: filepath.Join(dir, "err"),
	}
}

func wait(t *testing.T, rt *containerd.Runtime, id string) runtime.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	es, err := rt.Wait(ctx, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return es
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func owner(t *testing.T, path string) [2]uint32 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint32{st.Uid, st.Gid}
}

func TestHostImageRunsAsUserWithOutputFiles(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	dir := jobDir(t)
	tmp := jobDir(t)

	cfg := hostTask(t, dir, "/bin/sh", "-c", "echo out; echo err >&2; id -u; hostname; echo tmp > /tmp/f; exit 3")
	cfg.Mounts = []runtime.Mount{{Source: dir, Dest: dir}, {Source: tmp, Dest: "/tmp"}}
	if err := os.Chown(tmp, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	es := wait(t, rt, cfg.ID)
	if diff := cmp.Diff(runtime.ExitStatus{Code: 3}, es, cmpopts.IgnoreFields(runtime.ExitStatus{}, "ExitedAt")); diff != "" {
		t.Errorf("exit status (-want +got):\n%s", diff)
	}
	if es.ExitedAt.IsZero() || time.Since(es.ExitedAt) > time.Minute {
		t.Errorf("ExitedAt = %v, want just now", es.ExitedAt)
	}
	got := map[string]string{
		"out": readFile(t, cfg.StdoutPath),
		"err": readFile(t, cfg.StderrPath),
		"tmp": readFile(t, filepath.Join(tmp, "f")),
	}
	want := map[string]string{"out": "out\n65534\njob42\n", "err": "err\n", "tmp": "tmp\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	for _, p := range []string{cfg.StdoutPath, cfg.StderrPath} {
		if o := owner(t, p); o != [2]uint32{nobody, nobody} {
			t.Errorf("%s owned by %v, want nobody", p, o)
		}
	}
	// The exit stays visible until Delete; Wait again returns at once.
	if es2 := wait(t, rt, cfg.ID); es2.Code != 3 {
		t.Errorf("second Wait: code %d, want 3", es2.Code)
	}
	if err := rt.Delete(ctx, cfg.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func TestMergedOutputAppends(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	dir := jobDir(t)
	cfg := hostTask(t, dir, "/bin/sh", "-c", "echo out; echo err >&2")
	cfg.StderrPath = cfg.StdoutPath
	if err := os.WriteFile(cfg.StdoutPath, []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cfg.StdoutPath, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Errorf("exit code %d, want 0", es.Code)
	}
	if diff := cmp.Diff("before\nout\nerr\n", readFile(t, cfg.StdoutPath)); diff != "" {
		t.Errorf("merged output (-want +got):\n%s", diff)
	}
}

func TestOutputFileOfAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	dir := jobDir(t)
	cfg := hostTask(t, dir, "/bin/true")
	if err := os.WriteFile(cfg.StdoutPath, nil, 0o644); err != nil { // owned by root
		t.Fatal(err)
	}
	err := rt.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 0") {
		t.Fatalf("Start = %v, want an error about the file's owner", err)
	}
	assertGone(t, rt, cfg.ID)
}

// startThenTerm starts cfg, sends SIGTERM right away and requires the
// task to end by it (signal 15, code 143).
func startThenTerm(t *testing.T, rt *containerd.Runtime, cfg runtime.TaskConfig) {
	t.Helper()
	ctx := context.Background()
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := rt.Signal(ctx, cfg.ID, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	es := wait(t, rt, cfg.ID)
	if es.Signal != syscall.SIGTERM || es.Code != 128+15 {
		// What the task wrote says why it ended otherwise (seen once in
		// a full run: code 2, no signal, after 0.7 s).
		stderr, _ := os.ReadFile(cfg.StderrPath)
		stdout, _ := os.ReadFile(cfg.StdoutPath)
		t.Errorf("exit = %+v, want signal 15, code 143; the task's stderr: %q, stdout: %q", es, stderr, stdout)
	}
}

func TestSignalTermReachesJob(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	cfg := hostTask(t, jobDir(t), "sleep", "600")
	startThenTerm(t, rt, cfg)
	// Signalling an exited task is harmless; a missing one is ErrNotFound.
	if err := rt.Signal(ctx, cfg.ID, syscall.SIGTERM); err != nil {
		t.Errorf("Signal after exit: %v", err)
	}
	if err := rt.Signal(ctx, "no-such-task", syscall.SIGTERM); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Signal(missing) = %v, want ErrNotFound", err)
	}
}

// TestSignalBeforeJobForkedReachesJob signals a task right after its
// start, while its shell wrapper (PID 1, which the kernel shields from
// signals it has no handler for) has not forked the job yet: the job must
// still get the signal. The wrapper looks the job's command up in the
// parent, before the fork, through a PATH of thousands of missing
// directories, and the task's CPU quota (1 ms per 100 ms) stretches that
// look-up over seconds, so the signal lands before the fork on any
// machine; without Signal's catch-up the job sleeps on and Wait times out.
func TestSignalBeforeJobForkedReachesJob(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	cfg := hostTask(t, jobDir(t), "sleep", "600")
	var path strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&path, "/nonexistent/d%d:", i)
	}
	cfg.Env = []string{"PATH=" + path.String() + "/usr/bin:/bin"}
	cfg.CPUs = 0.01
	startThenTerm(t, rt, cfg)
}

func TestMemoryLimitReportsOOMKilled(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	cfg := hostTask(t, jobDir(t), "/bin/sh", "-c", "head -c 200m /dev/zero | tail")
	cfg.MemoryBytes = 32 << 20
	cfg.CPUs = 1
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	es := wait(t, rt, cfg.ID)
	if !es.OOMKilled || es.Code == 0 {
		t.Errorf("exit = %+v, want OOMKilled with a non-zero code", es)
	}
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Exit == nil || !list[0].Exit.OOMKilled {
		t.Errorf("List = %+v, want one exited OOM-killed task", list)
	}
}

func TestCDIDeviceAndEnvOverride(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	cdiDir := writeTestCDI(t, "GPUD_CDI_ENV=from-cdi", "GPUD_CDI_ONLY=cdi")
	rt := newRuntime(t, addr, cdiDir)
	ctx := context.Background()

	cfg := hostTask(t, jobDir(t), "/bin/sh", "-c", `test -c /dev/gpud-test0 && echo "$GPUD_CDI_ENV $GPUD_CDI_ONLY"`)
	cfg.CDIDevices = []string{"gpud.test/dev=d0"}
	cfg.Env = append(cfg.Env, "GPUD_CDI_ENV=from-job")
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Errorf("exit code %d (stderr %q), want 0", es.Code, readFile(t, cfg.StderrPath))
	}
	if diff := cmp.Diff("from-job cdi\n", readFile(t, cfg.StdoutPath)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}

	bad := hostTask(t, jobDir(t), "/bin/true")
	bad.ID += "-bad"
	bad.CDIDevices = []string{"gpud.test/dev=nope"}
	err := rt.Start(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "gpud.test/dev=nope") || !strings.Contains(err.Error(), cdiDir) {
		t.Errorf("Start with unknown device = %v, want an error naming it and %s", err, cdiDir)
	}
	assertGone(t, rt, bad.ID)
}

func TestRestartedAgentReadoptsTask(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	first := newRuntime(t, addr)
	cfg := hostTask(t, jobDir(t), "sleep", "600")
	if err := first.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	// What the running job wrote stays: a second Start under its ID
	// (even one asking for emptied output) is refused before it touches
	// the output files.
	if err := os.WriteFile(cfg.StdoutPath, []byte("written by the job\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := cfg
	again.TruncateOutput = true
	if err := first.Start(ctx, again); !errors.Is(err, os.ErrExist) {
		t.Errorf("second Start = %v, want os.ErrExist", err)
	}
	if got := readFile(t, cfg.StdoutPath); got != "written by the job\n" {
		t.Errorf("the running job's output after a second Start = %q, want it untouched", got)
	}
	first.Close()

	second := newRuntime(t, addr)
	list, err := second.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.TaskInfo{{ID: cfg.ID, Labels: cfg.Labels, Status: runtime.StatusRunning}}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List while running (-want +got):\n%s", diff)
	}
	if err := second.Signal(ctx, cfg.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	es := wait(t, second, cfg.ID)
	if es.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v, want signal 9", es)
	}
	list, err = second.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = []runtime.TaskInfo{{ID: cfg.ID, Labels: cfg.Labels, Status: runtime.StatusExited, Exit: &es}}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List after exit (-want +got):\n%s", diff)
	}
	for range 2 { // deleting twice: the second finds nothing and is fine
		if err := second.Delete(ctx, cfg.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	assertGone(t, second, cfg.ID)
	if _, err := second.Wait(ctx, cfg.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Wait after Delete = %v, want ErrNotFound", err)
	}
}

func TestDeleteKillsRunningTask(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	cfg := hostTask(t, jobDir(t), "sleep", "600")
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := rt.Delete(ctx, cfg.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	assertGone(t, rt, cfg.ID)
}

func TestMissingImageIsExplained(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	cfg := hostTask(t, jobDir(t), "/bin/true")
	cfg.Image = "docker.io/library/nope:1"
	err := rt.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "ctr -n gpud images import") {
		t.Fatalf("Start = %v, want an error telling how to import the image", err)
	}
	assertGone(t, rt, cfg.ID)
}

func assertGone(t *testing.T, rt *containerd.Runtime, id string) {
	t.Helper()
	list, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range list {
		if ti.ID == id {
			t.Errorf("container %s still listed: %+v", id, ti)
		}
	}
}

func TestBusyboxImageRuns(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	const ref = "docker.io/gpud/busybox:test"
	var archive bytes.Buffer
	if err := containerd.WriteBusyboxImage(&archive, "/bin/busybox", ref); err != nil {
		t.Skipf("SKIPPED: no static busybox to build an image from: %v", err)
	}
	names, err := rt.ImportImage(ctx, &archive)
	if err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	if diff := cmp.Diff([]string{ref}, names); diff != "" {
		t.Fatalf("imported images (-want +got):\n%s", diff)
	}
	dir := jobDir(t)
	// The image has no /etc/os-release; the host has one.
	cfg := hostTask(t, dir, "sh", "-c", `test -e /etc/os-release && echo host || echo image; id -u; echo "$PATH"`)
	cfg.Image = ref
	cfg.Env = nil
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Errorf("exit %+v (stderr %q), want 0", es, readFile(t, cfg.StderrPath))
	}
	if diff := cmp.Diff("image\n65534\n/bin\n", readFile(t, cfg.StdoutPath)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	// The container had a snapshot of its own (key: its ID), made
	// from the image: it goes with the container.
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nctx := namespaces.WithNamespace(ctx, containerd.DefaultNamespace)
	if _, err := c.SnapshotService(containerd.Snapshotter).Stat(nctx, cfg.ID); err != nil {
		t.Fatalf("the job container's snapshot before Delete: %v", err)
	}
	if err := rt.Delete(ctx, cfg.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	assertGone(t, rt, cfg.ID)
	if _, err := c.SnapshotService(containerd.Snapshotter).Stat(nctx, cfg.ID); !errdefs.IsNotFound(err) {
		t.Errorf("the job container's snapshot after Delete: Stat = %v, want not found", err)
	}
}

// A kill -9 of the agent (or containerd) between task create and start
// leaves a created task; Delete must clear it so the same ID can start.
func TestDeleteCreatedTaskFreesID(t *testing.T) {
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	dir := jobDir(t)
	cfg := hostTask(t, dir, "/bin/sh", "-c", "echo ran")
	rt.SetCreateOnly(true)
	if err := rt.Start(context.Background(), cfg); err != nil {
		t.Fatalf("create: %v", err)
	}
	tasks, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].Status != runtime.StatusCreated {
		t.Fatalf("List = %+v, want one created task", tasks)
	}
	if err := rt.Delete(context.Background(), cfg.ID); err != nil {
		t.Fatalf("Delete of a created task: %v", err)
	}
	rt.SetCreateOnly(false)
	if err := rt.Start(context.Background(), cfg); err != nil {
		t.Fatalf("start the same ID again: %v", err)
	}
	if st := wait(t, rt, cfg.ID); st.Code != 0 {
		t.Fatalf("exit %+v", st)
	}
	if err := rt.Delete(context.Background(), cfg.ID); err != nil {
		t.Fatal(err)
	}
}

// writeTestCDI writes a CDI spec of one device, gpud.test/dev=d0
// (/dev/gpud-test0, the host's /dev/null), setting env in the container,
// into a new directory it returns.
func writeTestCDI(t *testing.T, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	edits := map[string]any{
		"deviceNodes": []any{map[string]any{"path": "/dev/gpud-test0", "hostPath": "/dev/null", "type": "c", "major": 1, "minor": 3}},
	}
	if len(env) > 0 {
		edits["env"] = env
	}
	spec := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       "gpud.test/dev",
		"devices":    []any{map[string]any{"name": "d0", "containerEdits": edits}},
	}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "test.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
