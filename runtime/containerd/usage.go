package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpud/gpud/runtime"
)

var _ runtime.UsageReader = (*Runtime)(nil)

// TaskUsage reads the CPU time and memory of the task's cgroup (the
// cgroupfs driver's path from the container's spec), on cgroup v2 or v1.
func (r *Runtime) TaskUsage(ctx context.Context, id string) (runtime.TaskUsage, error) {
	ctx = r.nsCtx(ctx)
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return runtime.TaskUsage{}, fmt.Errorf("read usage of container %s: %w", id, err)
	}
	s, err := ctr.Spec(ctx)
	if err != nil {
		return runtime.TaskUsage{}, fmt.Errorf("read usage of container %s: %w", id, err)
	}
	if s.Linux == nil || s.Linux.CgroupsPath == "" {
		return runtime.TaskUsage{}, fmt.Errorf("read usage of container %s: its spec names no cgroup", id)
	}
	u, err := cgroupUsage(r.cgroupRoot, s.Linux.CgroupsPath)
	if err != nil {
		return runtime.TaskUsage{}, fmt.Errorf("read usage of container %s: %w", id, err)
	}
	return u, nil
}

// cgroupUsage reads a cgroupfs-driver cgroup path ("/gpud/job-1"):
// cpu.stat usage_usec and memory.current on v2, cpuacct.usage (ns) and
// memory.usage_in_bytes on v1.
func cgroupUsage(root, path string) (runtime.TaskUsage, error) {
	var u runtime.TaskUsage
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		b, err := os.ReadFile(filepath.Join(root, path, "cpu.stat"))
		if err != nil {
			return u, err
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return u, fmt.Errorf("parse %s cpu.stat usage_usec %q: %w", path, v, err)
				}
				u.CPUSeconds = float64(n) / 1e6
			}
		}
		mem, err := readInt(filepath.Join(root, path, "memory.current"))
		u.MemBytes = mem
		u.MemPeakBytes = readPeak(filepath.Join(root, path, "memory.peak"))
		return u, err
	}
	ns, err := readInt(filepath.Join(root, "cpuacct", path, "cpuacct.usage"))
	if err != nil {
		return u, err
	}
	u.CPUSeconds = float64(ns) / 1e9
	u.MemBytes, err = readInt(filepath.Join(root, "memory", path, "memory.usage_in_bytes"))
	u.MemPeakBytes = readPeak(filepath.Join(root, "memory", path, "memory.max_usage_in_bytes"))
	return u, err
}

// readPeak reads a cgroup's peak memory, 0 when the kernel keeps none
// (memory.peak is Linux 5.19's): the sample goes on without it.
func readPeak(file string) int64 {
	n, err := readInt(file)
	if err != nil {
		return 0
	}
	return n
}

func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", file, err)
	}
	return n, nil
}
