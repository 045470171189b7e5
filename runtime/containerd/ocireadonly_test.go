package containerd_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// TestOCIRuntimeReadOnlyBind: under a containerd started by StartDaemon
// (whose environment says _LIBCONTAINER_CLONED_BINARY=1), the shims run
// crun from a read-only bind of it under /run/gpud/oci (the same file, on
// a read-only mount, recorded as each container's BinaryName), a second
// runtime finds that bind instead of stacking another, a job runs under
// it, and crun run from it does not copy and execute itself again (where
// strace is installed to see its execs).
func TestOCIRuntimeReadOnlyBind(t *testing.T) {
	containerdtest.RequireCrun(t)
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	real, err := filepath.EvalSymlinks(containerdtest.Crun())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := containerd.New(ctx, containerd.Options{Address: addr, OCIRuntime: containerdtest.Crun()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	bin, why := rt.OCIRuntime()
	if why != "" || !strings.HasPrefix(bin, "/run/gpud/oci/") || filepath.Base(bin) != filepath.Base(real) {
		t.Fatalf("shims' binary %q (not read-only: %q), want a bind of %s under /run/gpud/oci", bin, why, real)
	}
	var src, st unix.Stat_t
	var fs unix.Statfs_t
	if err := unix.Stat(real, &src); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(bin, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(bin, &fs); err != nil {
		t.Fatal(err)
	}
	if st.Dev != src.Dev || st.Ino != src.Ino || fs.Flags&unix.ST_RDONLY == 0 {
		t.Fatalf("%s: dev/ino %d/%d read-only %v, want %s's %d/%d on a read-only mount", bin, st.Dev, st.Ino, fs.Flags&unix.ST_RDONLY != 0, real, src.Dev, src.Ino)
	}
	if f, err := os.OpenFile(bin, os.O_WRONLY, 0); err == nil {
		f.Close()
		t.Fatalf("%s opened for writing, want EROFS", bin)
	}
	before := mountsAt(t, bin)
	rt2, err := containerd.New(ctx, containerd.Options{Address: addr, OCIRuntime: containerdtest.Crun(), RuncRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	if bin2, _ := rt2.OCIRuntime(); bin2 != bin {
		t.Errorf("second runtime's binary %q, want the first's bind %q", bin2, bin)
	}
	if n := mountsAt(t, bin); n != before || n == 0 {
		t.Errorf("%d mounts at %s after a second runtime, %d before: want it found again, not stacked", n, bin, before)
	}

	const ref = "docker.io/gpud/busybox:test"
	var archive bytes.Buffer
	if err := containerd.WriteBusyboxImage(&archive, "/bin/busybox", ref); err != nil {
		t.Fatalf("no static busybox to build an image from: %v", err)
	}
	if _, err := rt.ImportImage(ctx, &archive); err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	dir := jobDir(t)
	cfg := hostTask(t, dir, "sh", "-c", "echo ran")
	cfg.Image, cfg.Env = ref, []string{"PATH=/bin"}
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctr, err := c.LoadContainer(namespaces.WithNamespace(ctx, containerd.DefaultNamespace), cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ctr.Info(namespaces.WithNamespace(ctx, containerd.DefaultNamespace))
	if err != nil {
		t.Fatal(err)
	}
	if info.Runtime.Options == nil || !bytes.Contains(info.Runtime.Options.GetValue(), []byte(bin)) {
		t.Errorf("container's runtime options %v do not name %s", info.Runtime.Options, bin)
	}
	if es := wait(t, rt, cfg.ID); es.Code != 0 || strings.TrimSpace(readFile(t, cfg.StdoutPath)) != "ran" {
		t.Errorf("job under the bound crun: exit %d, output %q %q", es.Code, readFile(t, cfg.StdoutPath), readFile(t, cfg.StderrPath))
	}
	if err := rt.Delete(ctx, cfg.ID); err != nil {
		t.Fatal(err)
	}

	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Logf("no strace: crun's execs not counted")
		return
	}
	for _, tc := range []struct {
		bin   string
		execs int
	}{{bin, 1}, {real, 2}} {
		cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=execve,execveat", tc.bin, "--root", t.TempDir(), "delete", "--force", "gpud-none")
		cmd.Env = append(os.Environ(), "_LIBCONTAINER_CLONED_BINARY=1")
		out, _ := cmd.CombinedOutput() // the delete fails: no such container
		if n := strings.Count(string(out), "execve"); n != tc.execs {
			t.Errorf("crun from %s executed %d times, want %d:\n%s", tc.bin, n, tc.execs, out)
		}
	}
}

// mountsAt counts the mounts at path in this process's mount table.
func mountsAt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			n++
		}
	}
	return n
}

// TestDaemonCopiesRuntime: the read-only bind is used only for a
// containerd whose environment has _LIBCONTAINER_CLONED_BINARY=1 exactly
// and that shares the caller's mount namespace.
func TestDaemonCopiesRuntime(t *testing.T) {
	t.Parallel()
	self := t.TempDir()
	if err := os.Mkdir(filepath.Join(self, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(self, "ns", "mnt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	proc := func(env string, sameNS bool) string {
		p := t.TempDir()
		if err := os.WriteFile(filepath.Join(p, "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(p, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if sameNS {
			if err := os.Link(filepath.Join(self, "ns", "mnt"), filepath.Join(p, "ns", "mnt")); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(filepath.Join(p, "ns", "mnt"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		env    string
		sameNS bool
		want   string // "" or a part of the reason
	}{
		{"PATH=/bin\x00_LIBCONTAINER_CLONED_BINARY=1\x00", true, ""},
		{"_LIBCONTAINER_CLONED_BINARY=1\x00HOME=/root\x00", true, ""},
		{"PATH=/bin\x00", true, "no _LIBCONTAINER_CLONED_BINARY=1"},
		{"X_LIBCONTAINER_CLONED_BINARY=1\x00", true, "no _LIBCONTAINER_CLONED_BINARY=1"},
		{"_LIBCONTAINER_CLONED_BINARY=10\x00", true, "no _LIBCONTAINER_CLONED_BINARY=1"},
		{"_LIBCONTAINER_CLONED_BINARY=1\x00", false, "another mount namespace"},
	} {
		got := containerd.DaemonCopiesRuntime(proc(tc.env, tc.sameNS), self)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("env %q same namespace %v: %q, want %q", tc.env, tc.sameNS, got, tc.want)
		}
	}
}
