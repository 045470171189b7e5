package containerd_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// BenchmarkBareContainerd is the baseline for gpud's end-to-end job
// throughput: containerd's own client creating, starting, waiting for and
// deleting trivial containers (a busybox rootfs running /bin/true) with 8
// at a time, no gpud code in the path. It reports containers per second.
func BenchmarkBareContainerd(b *testing.B) {
	addr := containerdtest.Start(b)
	rootfs := busyboxRootfs(b, "true")
	c, err := client.New(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), "bench")

	run := func(id string) error {
		ctr, err := c.NewContainer(ctx, id, client.WithNewSpec(oci.WithRootFSPath(rootfs), oci.WithRootFSReadonly(), oci.WithProcessArgs("/bin/true")))
		if err != nil {
			return err
		}
		defer ctr.Delete(ctx)
		task, err := ctr.NewTask(ctx, cio.NullIO)
		if err != nil {
			return err
		}
		return runToExit(ctx, task)
	}

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := run(fmt.Sprintf("bare-%d", i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "containers/s")
}

// runToExit starts a created task, waits for its exit, deletes it and
// says whether it exited 0 (the bare-containerd benchmarks' task life).
func runToExit(ctx context.Context, task client.Task) error {
	exitc, err := task.Wait(ctx)
	if err != nil {
		return err
	}
	if err := task.Start(ctx); err != nil {
		return err
	}
	st := <-exitc
	if _, err := task.Delete(ctx); err != nil {
		return err
	}
	if st.ExitCode() != 0 {
		return fmt.Errorf("exit %d", st.ExitCode())
	}
	return nil
}

// busyboxRootfs is a rootfs of /bin/busybox with the applets names linked
// to it, for the bare-containerd benchmarks (skipped loudly without it).
func busyboxRootfs(b *testing.B, names ...string) string {
	rootfs := b.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		b.Fatal(err)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		b.Skipf("SKIP (loud): /bin/busybox missing (apt-get install busybox-static): %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), bb, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, n := range names {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", n)); err != nil {
			b.Fatal(err)
		}
	}
	return rootfs
}

// BenchmarkStartToRunning is one job container from the call to running,
// one at a time on an otherwise idle containerd (the host's root, the
// job's shape as the node agent builds it: user, binds, limits): "cold"
// is Start (container, shim, runc create, start), "prepared" is
// StartPrepared on a container Prepare made beforehand (untimed): only
// the relabel, the output files and runc start. It reports the p50 and
// p99 in ms.
func BenchmarkStartToRunning(b *testing.B) {
	addr := containerdtest.Start(b)
	rt, err := containerd.New(context.Background(), containerd.Options{Address: addr})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		b.Fatal(err)
	}
	cfgOf := func(id string) runtime.TaskConfig {
		return runtime.TaskConfig{ID: id, Labels: map[string]string{"gpud.job": id}, Image: runtime.ImageHost,
			Args: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: 65534, GID: 65534,
			Hostname: "bench", Mounts: []runtime.Mount{{Source: dir, Dest: dir}}, CPUs: 1, MemoryBytes: 256 << 20}
	}
	for _, mode := range []string{"cold", "prepared"} {
		b.Run(mode, func(b *testing.B) {
			var took []time.Duration
			for i := 0; i < b.N; i++ {
				cfg := cfgOf(fmt.Sprintf("%s-%d", mode, i))
				b.StopTimer()
				if mode == "prepared" {
					if err := rt.Prepare(ctx, cfg); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				t0 := time.Now()
				if mode == "prepared" {
					err = rt.StartPrepared(ctx, cfg.ID, cfg)
				} else {
					err = rt.Start(ctx, cfg)
				}
				took = append(took, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if es, err := rt.Wait(ctx, cfg.ID); err != nil || es.Code != 0 {
					b.Fatalf("wait: %v %+v", err, es)
				}
				if err := rt.Delete(ctx, cfg.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "ms-p99")
		})
	}
}

// BenchmarkPreparedIdleCost is what a prepared container costs while it
// waits: 8 are prepared (as the job's user, on the host's root), then for
// 10 s their processes (the shims and the runtime's init waiting to exec
// the job) are watched: resident memory per container (VmRSS of each
// process once, shared pages counted in each) and CPU time per container
// per minute (utime+stime, from /proc); PSS shares the pages the shims and
// inits have in common among them, so it is what one more prepared
// container costs. "runc": each container's own shim and runc's init (Go);
// "crun-grouped": crun as the OCI runtime (crun's init, C) and
// shim_group_size 8, so the 8 share one shim, whose memory and CPU (and
// its keeper's init) are split among them. crun-grouped is skipped where
// crun cannot run host-root containers (before 1.22; GPUD_TEST_CRUN names
// a newer one). Each iteration takes the 10 s: run it with -benchtime=1x.
func BenchmarkPreparedIdleCost(b *testing.B) {
	for _, mode := range []string{"runc", "crun-grouped"} {
		b.Run(mode, func(b *testing.B) { preparedIdleCost(b, mode) })
	}
}

func preparedIdleCost(b *testing.B, mode string) {
	opts := containerd.Options{}
	if mode == "crun-grouped" {
		if why := containerdtest.MissingCrun(); why != "" {
			b.Skipf("SKIPPED: %s", why)
		}
		if why := crunHostRoot(); why != "" {
			b.Skipf("SKIPPED: %s", why)
		}
		opts.OCIRuntime, opts.ShimGroupSize = containerdtest.Crun(), 8
	}
	opts.Address = containerdtest.Start(b)
	rt, err := containerd.New(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	c, err := client.New(opts.Address)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	nctx := namespaces.WithNamespace(ctx, containerd.DefaultNamespace)
	const n = 8
	window := 10 * time.Second
	for it := 0; it < b.N; it++ {
		var pids []int
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("idle-%d-%d", it, i)
			cfg := runtime.TaskConfig{ID: id, Image: runtime.ImageHost, Args: []string{"/bin/true"}, UID: 65534, GID: 65534, Hostname: "idle"}
			if err := rt.Prepare(ctx, cfg); err != nil {
				b.Fatal(err)
			}
			defer rt.Delete(ctx, id)
			ctr, err := c.LoadContainer(nctx, id)
			if err != nil {
				b.Fatal(err)
			}
			task, err := ctr.Task(nctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			init := int(task.Pid())
			for _, p := range []int{init, procField(b, init, 3)} { // the init and its shim
				if !slices.Contains(pids, p) {
					pids = append(pids, p)
				}
			}
		}
		if mode == "crun-grouped" {
			// The group's keeper (a container created, never started)
			// holds the shim up: its init, the shim's other child, is the
			// group's cost too.
			for _, p := range childrenOf(b, pids) {
				if !slices.Contains(pids, p) {
					pids = append(pids, p)
				}
			}
		}
		cpu0 := 0
		for _, p := range pids {
			cpu0 += procField(b, p, 13) + procField(b, p, 14)
		}
		time.Sleep(window) // the thing measured is time passing
		cpu1, rss, pss := 0, 0, 0
		for _, p := range pids {
			cpu1 += procField(b, p, 13) + procField(b, p, 14)
			rss += procKiB(b, fmt.Sprintf("/proc/%d/status", p), "VmRSS:")
			pss += procKiB(b, fmt.Sprintf("/proc/%d/smaps_rollup", p), "Pss:")
		}
		b.ReportMetric(float64(len(pids)), "processes")
		b.ReportMetric(float64(rss)/n, "KiB-rss/container")
		b.ReportMetric(float64(pss)/n, "KiB-pss/container")
		b.ReportMetric(float64(cpu1-cpu0)*10/n*(float64(time.Minute)/float64(window)), "cpu-ms/container/min")
	}
}

// crunHostRoot says why the tests' crun cannot run host-root containers
// ("" if it can): crun before 1.22 (containers/crun#1752).
func crunHostRoot() string {
	out, err := exec.Command(containerdtest.Crun(), "--version").Output()
	if err != nil {
		return fmt.Sprintf("%s --version: %v", containerdtest.Crun(), err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	var major, minor int
	if _, err := fmt.Sscanf(first, "crun version %d.%d", &major, &minor); err != nil || major == 1 && minor < 22 {
		return first + " runs no host-root container (1.22 or later does; set GPUD_TEST_CRUN)"
	}
	return ""
}

// childrenOf lists the children of the processes pids (every thread's).
func childrenOf(b *testing.B, pids []int) []int {
	var out []int
	for _, p := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range tasks {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, t.Name()))
			if err != nil {
				continue // the thread ended meanwhile
			}
			for _, f := range strings.Fields(string(raw)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// procField is field i (0-based, after the command) of /proc/pid/stat.
func procField(b *testing.B, pid, i int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	v, err := strconv.Atoi(f[i-2])
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// procKiB is the kB value of the line starting with key in file.
func procKiB(b *testing.B, file, key string) int {
	raw, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	b.Fatalf("no %s in %s", key, file)
	return 0
}
