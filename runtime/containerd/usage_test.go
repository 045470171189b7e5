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
	write(v2, "gpud/j1/memory.peak", "3145728\n")
	v1 := t.TempDir()
	write(v1, "cpuacct/gpud/j1/cpuacct.usage", "1500000000\n")
	write(v1, "memory/gpud/j1/memory.usage_in_bytes", "2097152\n")
	write(v1, "memory/gpud/j1/memory.max_usage_in_bytes", "4194304\n")
	// A kernel before memory.peak (Linux 5.19): no peak, the rest read.
	old := t.TempDir()
	write(old, "cgroup.controllers", "cpu memory\n")
	write(old, "gpud/j1/cpu.stat", "usage_usec 1000000\n")
	write(old, "gpud/j1/memory.current", "1048576\n")
	for _, tc := range []struct {
		root           string
		cpu            float64
		memBytes, peak int64
	}{{v2, 2.5, 1 << 20, 3 << 20}, {v1, 1.5, 2 << 20, 4 << 20}, {old, 1, 1 << 20, 0}} {
		u, err := cgroupUsage(tc.root, "/gpud/j1")
		if err != nil || u.CPUSeconds != tc.cpu || u.MemBytes != tc.memBytes || u.MemPeakBytes != tc.peak {
			t.Errorf("cgroupUsage(%s) = %+v, %v; want %v CPU-s, %d bytes, peak %d", tc.root, u, err, tc.cpu, tc.memBytes, tc.peak)
		}
	}
	if _, err := cgroupUsage(v2, "/gpud/gone"); err == nil {
		t.Error("cgroupUsage of a missing cgroup: no error")
	}
}
