package containerd

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/google/go-cmp/cmp"
	"github.com/pelletier/go-toml/v2"

	"github.com/gpud/gpud/runtime"
)

func TestExitStatus(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		code uint32
		want runtime.ExitStatus
	}{
		{name: "success", code: 0, want: runtime.ExitStatus{ExitedAt: at}},
		{name: "exit 3", code: 3, want: runtime.ExitStatus{Code: 3, ExitedAt: at}},
		{name: "exit 128 is not a signal", code: 128, want: runtime.ExitStatus{Code: 128, ExitedAt: at}},
		{name: "SIGTERM", code: 143, want: runtime.ExitStatus{Code: 143, Signal: syscall.SIGTERM, ExitedAt: at}},
		{name: "SIGKILL", code: 137, want: runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL, ExitedAt: at}},
		{name: "255 is beyond signals", code: 255, want: runtime.ExitStatus{Code: 255, ExitedAt: at}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, exitStatus(tc.code, at)); diff != "" {
				t.Errorf("exitStatus(%d) (-want +got):\n%s", tc.code, diff)
			}
		})
	}
}

func TestTaskStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   tasktypes.Status
		want runtime.TaskStatus
	}{
		{tasktypes.Status_CREATED, runtime.StatusCreated},
		{tasktypes.Status_RUNNING, runtime.StatusRunning},
		{tasktypes.Status_PAUSED, runtime.StatusRunning},
		{tasktypes.Status_STOPPED, runtime.StatusExited},
		{tasktypes.Status_UNKNOWN, runtime.StatusUnknown},
	}
	for _, tc := range tests {
		if got := taskStatus(tc.in); got != tc.want {
			t.Errorf("taskStatus(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestOOMKillCount(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		files   map[string]string
		want    int
		wantErr bool
	}{
		{
			name:  "cgroup v1",
			files: map[string]string{"memory/gpud/j1/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"},
			want:  2,
		},
		{
			name: "cgroup v2",
			files: map[string]string{
				"cgroup.controllers":    "cpu memory\n",
				"gpud/j1/memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
			},
			want: 1,
		},
		{name: "cgroup gone", files: map[string]string{}, wantErr: true},
		{name: "old kernel without counter", files: map[string]string{"memory/gpud/j1/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, c := range tc.files {
				write(t, filepath.Join(root, p), c)
			}
			got, err := oomKillCount(root, "/gpud/j1")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("oomKillCount = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCreateOutputFile(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: chown to another user needs root")
	}
	// The user creates its own files: give uid 1234 a directory it owns,
	// reachable through parents it may traverse.
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	rootOnly := t.TempDir() // like /etc: root's, 0755
	if err := os.Chmod(rootOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	owned := func(path string) [2]uint32 {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return [2]uint32{st.Uid, st.Gid}
	}

	fresh := filepath.Join(dir, "fresh.out")
	if err := createOutputFile(fresh, 1234, 5678, nil, false); err != nil {
		t.Fatal(err)
	}
	if got := owned(fresh); got != [2]uint32{1234, 5678} {
		t.Errorf("new file owned by %v, want 1234:5678", got)
	}
	if err := os.WriteFile(fresh, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := createOutputFile(fresh, 1234, 5678, nil, false); err != nil {
		t.Errorf("existing file of the same user: %v", err)
	}
	if b, _ := os.ReadFile(fresh); string(b) != "kept" {
		t.Errorf("existing file content = %q, want it kept for appending", b)
	}

	// --open-mode=truncate on a first start empties the file, as the user.
	if err := createOutputFile(fresh, 1234, 5678, nil, true); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if b, _ := os.ReadFile(fresh); len(b) != 0 {
		t.Errorf("truncated file holds %q", b)
	}
	// A missing directory is made as the user (issue 14: jobs start
	// before a client makes the folder), never where the user cannot.
	nested := filepath.Join(dir, "logs", "deep", "x.out")
	if err := createOutputFile(nested, 1234, 5678, nil, false); err != nil {
		t.Fatalf("missing directory: %v", err)
	}
	if got := owned(filepath.Dir(nested)); got != [2]uint32{1234, 5678} {
		t.Errorf("made directory owned by %v, want 1234:5678", got)
	}
	if err := createOutputFile(filepath.Join(rootOnly, "sub", "x.out"), 1234, 5678, nil, false); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("directory under a root-only one: %v, want permission denied", err)
	}

	tests := []struct {
		name    string
		setup   func(path string)
		wantErr string
	}{
		{name: "another user's file", setup: func(p string) { os.WriteFile(p, nil, 0o644) }, wantErr: "belongs to uid 0"},
		{name: "symlink", setup: func(p string) { os.Symlink("/etc/shadow", p) }, wantErr: "not a regular file"},
		{name: "directory", setup: func(p string) { os.Mkdir(p, 0o755) }, wantErr: "not a regular file"},
		// The escalation: root would create /etc/ld.so.preload for the user.
		{name: "directory the user cannot write", setup: func(string) {}, wantErr: "permission denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			switch tc.name {
			case "directory the user cannot write":
				p = filepath.Join(rootOnly, "ld.so.preload")
			}
			tc.setup(p)
			err := createOutputFile(p, 1234, 5678, nil, false)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(rootOnly, "ld.so.preload")); err == nil {
		t.Fatal("created a file in a directory the user cannot write")
	}
	if fi, err := os.Lstat("/etc/shadow"); err == nil {
		if st := fi.Sys().(*syscall.Stat_t); st.Uid == 1234 {
			t.Fatal("followed the symlink and chowned /etc/shadow")
		}
	}
}

func TestSocketPath(t *testing.T) {
	t.Parallel()
	if got := SocketPath("/var/lib/gpud/containerd"); got != "/var/lib/gpud/containerd/containerd.sock" {
		t.Errorf("short dir: %s", got)
	}
	long := "/" + strings.Repeat("x", 120)
	got := SocketPath(long)
	if len(got) > maxSocketPath || strings.HasPrefix(got, long) || got != SocketPath(long) {
		t.Errorf("long dir: %s (%d bytes), want a short, stable path elsewhere", got, len(got))
	}
	if SocketPath(long) == SocketPath(long+"y") {
		t.Error("different dirs share a socket path")
	}
}

func TestDaemonConfig(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Version         int                      `toml:"version"`
		Root            string                   `toml:"root"`
		State           string                   `toml:"state"`
		DisabledPlugins []string                 `toml:"disabled_plugins"`
		GRPC            struct{ Address string } `toml:"grpc"`
		TTRPC           struct{ Address string } `toml:"ttrpc"`
	}
	dir := `/var/lib/g "q"`
	if err := toml.Unmarshal([]byte(daemonConfig(dir, "/s/c.sock")), &cfg); err != nil {
		t.Fatalf("config is not TOML: %v", err)
	}
	want := cfg
	want.Version, want.Root, want.State = 2, dir+"/root", dir+"/state"
	want.DisabledPlugins = []string{"io.containerd.grpc.v1.cri"}
	want.GRPC.Address, want.TTRPC.Address = "/s/c.sock", "/s/c.sock.ttrpc"
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

// killCgroup must kill what is left in a container's cgroup and return
// once the cgroup is empty.
func TestKillCgroup(t *testing.T) {
	root := t.TempDir()
	procs := filepath.Join(root, "pids", "gpud", "0a1b2c3d-job-1", "cgroup.procs")
	if err := os.MkdirAll(filepath.Dir(procs), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel empties cgroup.procs when the process dies; play kernel.
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		_ = os.WriteFile(procs, nil, 0o644)
		exited <- err
	}()
	r := &Runtime{cgroupRoot: root, ns: "gpud", scope: "0a1b2c3d"}
	if err := r.killCgroupPath(r.cgroupsPath("job-1")); err != nil {
		t.Fatalf("killCgroup: %v", err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("sleep ended with %v, want killed", err)
	}
	if err := r.killCgroupPath(r.cgroupsPath("no-such-job")); err != nil {
		t.Fatalf("missing cgroup: %v", err)
	}
}

// Two containerds on one host (two clusters, or a test beside a cluster)
// may run containers of the same id; their cgroups must not be shared, or
// killing one job would kill the other.
func TestCgroupsPathPerRuntime(t *testing.T) {
	a := &Runtime{ns: "gpud", scope: cgroupScope("/run/gpud/runc/a")}
	b := &Runtime{ns: "gpud", scope: cgroupScope("/tmp/standalone/runc")}
	if pa, pb := a.cgroupsPath("gpud-1-1-node1"), b.cgroupsPath("gpud-1-1-node1"); pa == pb || !strings.HasPrefix(pa, "/gpud/") {
		t.Fatalf("cgroups %q and %q: want distinct paths under /gpud/", pa, pb)
	}
	if cgroupScope("/x") != cgroupScope("/x") {
		t.Fatal("scope is not stable for one runc root")
	}
}

// A restarted containerd leaves the bundle of a task it was creating when
// killed; the shim error names it, and only a fresh ID gets past it.
func TestStaleBundle(t *testing.T) {
	err := errors.New("failed to start shim: mkdir /tmp/x/containerd/state/io.containerd.runtime.v2.task/gpud/gpud-1-1-node1: file exists: unknown")
	if !staleBundle(err, "gpud", "gpud-1-1-node1") {
		t.Error("the shim's mkdir of this container's bundle is a stale bundle")
	}
	for _, other := range []struct{ ns, id string }{{"gpud", "gpud-1-1-node"}, {"other", "gpud-1-1-node1"}} {
		if staleBundle(err, other.ns, other.id) {
			t.Errorf("bundle of %s/%s matched another container's error", other.ns, other.id)
		}
	}
	if staleBundle(errors.New("permission denied"), "gpud", "gpud-1-1-node1") {
		t.Error("an unrelated error matched")
	}
}
