package containerd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionBefore(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"1.8.1", true}, {"1.21.9", true}, {"1.22", false}, {"1.22.0", false}, {"1.23.1", false},
		{"2.0", false}, {"1.22.0+dev", false}, {"0.9", true}, {"x.y", true}, {"", true},
	} {
		if got := versionBefore(c.v, crunHostRootVersion); got != c.want {
			t.Errorf("versionBefore(%q, 1.22) = %v, want %v", c.v, got, c.want)
		}
	}
}

func TestHybridProblem(t *testing.T) {
	if got := hybridProblem("/sys/fs/cgroup", "/sys/fs/cgroup/unified", nil); got != "" {
		t.Errorf("no controllers in v2: %q, want none", got)
	}
	got := hybridProblem("/sys/fs/cgroup", "/sys/fs/cgroup/unified", []string{"hugetlb", "misc"})
	for _, w := range []string{"(hugetlb misc)", "mount -t cgroup -o hugetlb none /sys/fs/cgroup/hugetlb", "mount -t cgroup -o misc none /sys/fs/cgroup/misc",
		"systemd.unified_cgroup_hierarchy=1", `oci_runtime = "runc"`} {
		if !strings.Contains(got, w) {
			t.Errorf("hybridProblem = %q, want it to say %q", got, w)
		}
	}
}

// TestOCIBinary: runc is the shim's default (no BinaryName); a name that
// is neither runc, crun nor an absolute path, a binary in a directory
// others can write (/tmp), a directory, and a binary that does not answer
// --version are refused, each saying why; crun resolves to its path.
func TestOCIBinary(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"", "runc"} {
		o, err := ociBinary(ctx, name, "/sys/fs/cgroup")
		if err != nil || o != (ociRuntime{hostRoot: true}) {
			t.Errorf("ociBinary(%q) = %+v, %v; want runc, the shim's default", name, o, err)
		}
	}
	writable := filepath.Join(t.TempDir(), "crun")
	if err := os.WriteFile(writable, []byte("#!/bin/sh\necho crun version 9.9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatal(err)
	}
	falseBin, _ = filepath.EvalSymlinks(falseBin)
	for _, c := range []struct{ name, want string }{
		{"bin/crun", `not "runc", "crun" or an absolute path`},
		{"/nonexistent/crun", "no such file"},
		{writable, "must be root's and not group- or world-writable"},
		{"/usr", "not an executable regular file"},
		{falseBin, "--version"},
	} {
		if _, err := ociBinary(ctx, c.name, "/sys/fs/cgroup"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ociBinary(%q) = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	crun, err := exec.LookPath("crun")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("SKIPPED (the refusals above ran): crun not on PATH or not root")
	}
	crun, _ = filepath.EvalSymlinks(crun)
	o, err := ociBinary(ctx, "crun", "/sys/fs/cgroup")
	if why := CrunCgroupProblem("/sys/fs/cgroup"); why != "" {
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ociBinary(crun) on cgroups crun refuses = %+v, %v; want the refusal %q", o, err, why)
		}
		return
	}
	if err != nil || o.binary != crun || !o.crun || !strings.HasPrefix(o.version, "crun version ") {
		t.Errorf("ociBinary(crun) = %+v, %v; want %s, crun", o, err, crun)
	}
	v, _ := strings.CutPrefix(o.version, "crun version ")
	if o.hostRoot != !versionBefore(v, crunHostRootVersion) {
		t.Errorf("ociBinary(crun) = %+v: hostRoot wrong for %s", o, v)
	}
}
