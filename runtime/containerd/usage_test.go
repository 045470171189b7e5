package containerd

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupUsage reads both cgroup layouts from a fake cgroupfs tree.
func TestCgroupUsage(t *testing.T) {
	t.Parallel()
	write := func(root, rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	write(v2, "cgroup.controllers", "cpu memory\n")
	write(v2, "gpud/j1/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
	write(v2, "gpud/j1/memory.current", "1048576\n")
	v1 := t.TempDir()
	write(v1, "cpuacct/gpud/j1/cpuacct.usage", "1500000000\n")
	write(v1, "memory/gpud/j1/memory.usage_in_bytes", "2097152\n")
	for _, tc := range []struct {
		root     string
		cpu      float64
		memBytes int64
	}{{v2, 2.5, 1 << 20}, {v1, 1.5, 2 << 20}} {
		u, err := cgroupUsage(tc.root, "/gpud/j1")
		if err != nil || u.CPUSeconds != tc.cpu || u.MemBytes != tc.memBytes {
			t.Errorf("cgroupUsage(%s) = %+v, %v; want %v CPU-s, %d bytes", tc.root, u, err, tc.cpu, tc.memBytes)
		}
	}
	if _, err := cgroupUsage(v2, "/gpud/gone"); err == nil {
		t.Error("cgroupUsage of a missing cgroup: no error")
	}
}
