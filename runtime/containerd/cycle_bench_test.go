package containerd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// BenchmarkRuntimeCycle is BareContainerdShimGroup's loop (8 at a time,
// each container created, started, waited for and deleted) through this
// package's Runtime, as the node agent drives it: a host-root /bin/true
// as nobody with its output files, under runc with each container's own
// shim ("runc") and under crun with shim groups of 8 ("crun-grouped",
// skipped where crun runs no host-root container). Besides containers/s
// it reports the CPU of containerd and everything it forks (shims, the
// OCI runtime) per container, and this process's (the calls' client side)
// per container.
func BenchmarkRuntimeCycle(b *testing.B) {
	addr := containerdtest.Start(b)
	usage := containerdCPU(b, addr)
	// The jobs' user writes its output there (b.TempDir's parents are
	// 0700).
	dir, err := os.MkdirTemp("", "gpudcycle")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		b.Fatal(err)
	}
	var round atomic.Int64
	for _, mode := range []string{"runc", "crun-grouped"} {
		b.Run(mode, func(b *testing.B) {
			opts := containerd.Options{Address: addr, Namespace: "cycle-" + mode}
			if mode == "crun-grouped" {
				if why := containerdtest.MissingCrun(); why != "" {
					b.Skipf("SKIPPED: %s", why)
				}
				if why := crunHostRoot(); why != "" {
					b.Skipf("SKIPPED: %s", why)
				}
				opts.OCIRuntime, opts.ShimGroupSize = containerdtest.Crun(), 8
			}
			rt, err := containerd.New(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			ctx := context.Background()
			r := round.Add(1)
			cycle := func(i int64) error {
				id := fmt.Sprintf("%s-%d-%d", mode, r, i)
				cfg := runtime.TaskConfig{ID: id, Labels: map[string]string{"gpud.job": id}, Image: runtime.ImageHost,
					Args: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: 65534, GID: 65534,
					Hostname: "bench", StdoutPath: filepath.Join(dir, id+".out"), StderrPath: filepath.Join(dir, id+".out")}
				if err := rt.Start(ctx, cfg); err != nil {
					return err
				}
				es, err := rt.Wait(ctx, id)
				if err == nil && es.Code != 0 {
					err = fmt.Errorf("%s exited %d", id, es.Code)
				}
				if derr := rt.Delete(ctx, id); err == nil {
					err = derr
				}
				return err
			}
			b.ResetTimer()
			cpu0, self0 := usage(), selfCPU()
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := cycle(i); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "containers/s")
			b.ReportMetric(float64((usage()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/container")
			b.ReportMetric(float64((selfCPU()-self0).Microseconds())/1000/float64(b.N), "client-cpu-ms/container")
		})
	}
}

// selfCPU is this process's CPU time (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// containerdCPU moves the containerd serving addr into a cpuacct cgroup
// of its own (back to the root one at the benchmark's end) and returns
// the CPU time it and everything it forks have used since.
func containerdCPU(b *testing.B, addr string) func() time.Duration {
	cg := fmt.Sprintf("/sys/fs/cgroup/cpuacct/gpud-cyclebench-%d", os.Getpid())
	if err := os.Mkdir(cg, 0o755); err != nil {
		b.Skipf("SKIPPED: no cgroup v1 cpuacct to count containerd's CPU in: %v", err)
	}
	b.Cleanup(func() { // containerd still runs: back to the root cgroup first
		for try := 0; try < 100; try++ {
			if raw, err := os.ReadFile(cg + "/cgroup.procs"); err == nil {
				for _, pid := range strings.Fields(string(raw)) {
					_ = os.WriteFile("/sys/fs/cgroup/cpuacct/cgroup.procs", []byte(pid), 0)
				}
			}
			if os.Remove(cg) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.Errorf("cgroup %s left behind", cg)
	})
	dir := filepath.Dir(strings.TrimPrefix(addr, "unix://"))
	ents, _ := os.ReadDir("/proc")
	moved := 0
	for _, e := range ents {
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmd), dir) && strings.HasPrefix(filepath.Base(strings.Split(string(cmd), "\x00")[0]), "containerd") {
			if err := os.WriteFile(cg+"/cgroup.procs", []byte(e.Name()), 0); err != nil {
				b.Fatal(err)
			}
			moved++
		}
	}
	if moved == 0 {
		b.Fatalf("no containerd under %s", dir)
	}
	return func() time.Duration {
		raw, err := os.ReadFile(cg + "/cpuacct.usage")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		return time.Duration(n)
	}
}
