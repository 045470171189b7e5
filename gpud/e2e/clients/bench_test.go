package clients

import (
	"bytes"
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

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// BenchmarkGpusubmitBinary runs the gpusubmit binary once per iteration,
// the way a user's shell loop does, against a cluster whose jobs stay
// pending (no nodes), and reports acknowledged submissions per second.
func BenchmarkGpusubmitBinary(b *testing.B) {
	c := e2etest.StartCluster(b, 0)
	work := b.TempDir()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		r := c.CLI(work, "gpusubmit", "--parsable", "--wrap", "true")
		if r.Code != 0 {
			b.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
}

// BenchmarkTrivialJobThroughput runs trivial jobs end to end (submit,
// schedule, containerd container, exit, accounting) on two nodes and
// reports finished jobs per second. Compare with runtime/containerd's
// BenchmarkBareContainerd on the same machine.
func BenchmarkTrivialJobThroughput(b *testing.B) {
	trivialJobs(b, e2etest.StartCluster(b, 2, "--cpus", "8"))
}

// BenchmarkTrivialJobThroughputPrepared is BenchmarkTrivialJobThroughput
// with node.toml prepared_containers = 4 (the jobs share one shape).
func BenchmarkTrivialJobThroughputPrepared(b *testing.B) {
	trivialJobs(b, e2etest.StartCluster(b, 2, "--cpus", "8", "--node-config", preparedNodeConfig(b, 4)))
}

// BenchmarkTrivialJobThroughputShimGroup is BenchmarkTrivialJobThroughput
// with node.toml shim_group_size = 8 (the jobs, all of one user, share
// runc shims up to 8 to a shim).
func BenchmarkTrivialJobThroughputShimGroup(b *testing.B) {
	trivialJobs(b, e2etest.StartCluster(b, 2, "--cpus", "8", "--node-config",
		nodeConfigWith(b, "\nshim_group_size = 0\n", "\nshim_group_size = 8\n")))
}

// BenchmarkTrivialJobThroughputImage is BenchmarkTrivialJobThroughput with
// the jobs in an image (a static busybox, imported into the cluster's
// containerd) under each OCI runtime (node.toml oci_runtime = "runc" and
// "crun"), with each container's own shim and with shim_group_size = 8:
// crun before 1.22 runs no job on the host's root (runtime/containerd
// ociruntime.go), so runc and crun are compared on image jobs, alternated
// in one process. The crun cases are skipped where crun cannot run.
func BenchmarkTrivialJobThroughputImage(b *testing.B) {
	for _, mode := range []string{"runc", "crun", "runc-shimgroup", "crun-shimgroup"} {
		b.Run(mode, func(b *testing.B) {
			c := ociCluster(b, mode)
			trivialJobsIn(b, c, importBusybox(b, c))
		})
	}
}

// BenchmarkTrivialJobThroughputCrun is BenchmarkTrivialJobThroughput (jobs
// on the host's root) and its ShimGroup case under crun, and the grouped
// case with prepared_containers = 1 (gpud as a site would run such a
// stream: crun, shim groups, a container prepared ahead): it needs crun
// 1.22 or later (GPUD_TEST_CRUN names one; Debian 12's 1.8.1 refuses
// host-root jobs) and is skipped otherwise.
func BenchmarkTrivialJobThroughputCrun(b *testing.B) {
	for _, mode := range []string{"crun", "crun-shimgroup", "crun-shimgroup-prepared"} {
		b.Run(mode, func(b *testing.B) {
			if why := containerdtest.MissingCrun(); why != "" {
				b.Skipf("SKIPPED: %s", why)
			}
			out, err := exec.Command(containerdtest.Crun(), "--version").Output()
			if err != nil {
				b.Fatal(err)
			}
			var major, minor int
			first, _, _ := strings.Cut(string(out), "\n")
			if _, err := fmt.Sscanf(first, "crun version %d.%d", &major, &minor); err != nil || major == 1 && minor < 22 {
				b.Skipf("SKIPPED: %s runs no host-root job (1.22 or later does; set GPUD_TEST_CRUN)", first)
			}
			trivialJobs(b, ociCluster(b, mode))
		})
	}
}

// ociCluster starts the benchmarks' two-node cluster with node.toml
// oci_runtime as mode says ("runc" or "crun", the crun tests' binary),
// for "-shimgroup" shim_group_size = 8 and for "-prepared"
// prepared_containers = 1; crun modes are skipped where crun cannot run.
func ociCluster(b *testing.B, mode string) *e2etest.Cluster {
	ort, rest, _ := strings.Cut(mode, "-")
	grouped := strings.Contains(rest, "shimgroup")
	prepared := strings.Contains(rest, "prepared")
	if ort == "crun" {
		if why := containerdtest.MissingCrun(); why != "" {
			b.Skipf("SKIPPED: %s", why)
		}
		ort = containerdtest.Crun()
	}
	conf := nodeConfigWith(b, "\noci_runtime = \"runc\"\n", fmt.Sprintf("\noci_runtime = %q # this benchmark's\n", ort))
	if grouped || prepared {
		raw, err := os.ReadFile(conf)
		if err != nil {
			b.Fatal(err)
		}
		s := string(raw)
		if grouped {
			s = strings.Replace(s, "\nshim_group_size = 0\n", "\nshim_group_size = 8\n", 1)
		}
		if prepared {
			s = strings.Replace(s, "\nprepared_containers = 0\n", "\nprepared_containers = 1\n", 1)
		}
		for on, line := range map[bool]string{grouped: "\nshim_group_size = 8\n", prepared: "\nprepared_containers = 1\n"} {
			if on && !strings.Contains(s, line) {
				b.Fatalf("etc/node.toml has no line to make %q", strings.TrimSpace(line))
			}
		}
		if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return e2etest.StartCluster(b, 2, "--cpus", "8", "--node-config", conf)
}

// importBusybox puts a static busybox image into cluster c's containerd
// and returns its reference.
func importBusybox(b *testing.B, c *e2etest.Cluster) string {
	const ref = "docker.io/gpud/busybox:bench"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(c.Dir, "containerd"))})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	var archive bytes.Buffer
	if err := containerd.WriteBusyboxImage(&archive, "/bin/busybox", ref); err != nil {
		b.Skipf("SKIPPED: no static busybox to build an image from: %v", err)
	}
	if _, err := rt.ImportImage(ctx, &archive); err != nil {
		b.Fatal(err)
	}
	return ref
}

func trivialJobs(b *testing.B, c *e2etest.Cluster) { trivialJobsIn(b, c, "") }

// trivialJobsIn runs b.N trivial jobs in image ("": the default, the
// host's root) submitted at once, and reports jobs/s and the cluster's
// CPU per job.
func trivialJobsIn(b *testing.B, c *e2etest.Cluster, image string) {
	work := b.TempDir()
	cl := c.Client()
	ctx := context.Background()
	js := spec.JobSpec{
		Name:      "trivial",
		Script:    "#!/bin/sh\ntrue\n",
		WorkDir:   work,
		SubmitDir: work,
		Output:    filepath.Join(work, "t-%j.out"),
		Requeue:   true,
		TimeLimit: spec.Duration(time.Minute),
		Image:     image,
	}
	cpu := clusterCPU(b, c)
	b.ResetTimer()
	cpu0 := cpu()
	start := time.Now()
	ids := make([]spec.JobID, 0, b.N)
	for range b.N {
		resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, resp.ID)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			j, err := cl.WaitJob(wctx, id)
			if err != nil || j.State != spec.StateCompleted {
				b.Errorf("job %d: %v %s %s", id, err, j.State, j.Reason)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
	// Until every job's container is deleted too, as bare containerd's
	// benchmark (BareContainerd*) deletes each container inside its
	// loop, and Slurm's round waits for its jobs' completing state: the
	// node deletes a container after recording the job's exit, so at
	// jobs/s's end the last jobs' deletes are still under way. The CPU
	// per job is taken there, with every delete in it.
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rt, err := containerd.New(gctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(c.Dir, "containerd"))})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	jobs := make(map[string]bool, len(ids))
	for _, id := range ids {
		jobs[fmt.Sprint(id)] = true
	}
	// A job's container by its gpud.job label (node.LabelJob): one
	// prepared for it and claimed has another ID.
	if err := rt.WaitGone(gctx, func(_ string, labels map[string]string) bool { return jobs[labels["gpud.job"]] }); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs-deleted/s")
	b.ReportMetric(float64((cpu()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/job")
	// How many started in a prepared container (the agents' JSON log).
	var all, prepared int
	for _, l := range strings.Split(c.Log.String(), "\n") {
		if strings.Contains(l, "job container started") {
			all++
			if strings.Contains(l, `"prepared":true`) {
				prepared++
			}
		}
	}
	if all > 0 {
		b.ReportMetric(100*float64(prepared)/float64(all), "%prepared")
	}
}

// BenchmarkIdleSubmitToRunning submits one container job at a time to an
// idle two-node cluster and waits for it to end before the next: the time
// from the submit call to the job's first instruction (its script writes
// the time, in ns, as it begins), p50 and p99 in ms. "cold" makes each
// job's container when it starts; "prepared" has node.toml
// prepared_containers = 1, so after the first job of the shape each
// starts in a container prepared while the cluster was idle; "shimgroup"
// has shim_group_size = 8, so after the first each is created in the
// user's shim, kept up by its keeper.
func BenchmarkIdleSubmitToRunning(b *testing.B) {
	for _, mode := range []string{"cold", "prepared", "shimgroup"} {
		b.Run(mode, func(b *testing.B) {
			extra := []string{"--cpus", "8"}
			switch mode {
			case "prepared":
				extra = append(extra, "--node-config", preparedNodeConfig(b, 1))
			case "shimgroup":
				extra = append(extra, "--node-config", nodeConfigWith(b, "\nshim_group_size = 0\n", "\nshim_group_size = 8\n"))
			}
			c := e2etest.StartCluster(b, 2, extra...)
			work := b.TempDir()
			cl := c.Client()
			ctx := context.Background()
			js := spec.JobSpec{Name: "first", Script: "#!/bin/sh\ndate +%s%N > \"$SLURM_SUBMIT_DIR/began-$GPUD_JOB_ID\"\n",
				WorkDir: work, SubmitDir: work, Output: filepath.Join(work, "t-%j.out"), TimeLimit: spec.Duration(time.Minute)}
			var took []time.Duration
			for i := 0; i < b.N+1; i++ { // the first makes the shape known
				t0 := time.Now()
				resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
				if err != nil {
					b.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				j, err := cl.WaitJob(wctx, resp.ID)
				cancel()
				if err != nil || j.State != spec.StateCompleted {
					b.Fatalf("job %d: %v %s %s", resp.ID, err, j.State, j.Reason)
				}
				raw, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("began-%d", resp.ID)))
				if err != nil {
					b.Fatal(err)
				}
				ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					took = append(took, time.Unix(0, ns).Sub(t0))
				}
				// Idle between jobs, as on a quiet cluster (and time for
				// the node to prepare the next container).
				time.Sleep(300 * time.Millisecond)
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "ms-p99")
		})
	}
}

// clusterCPU puts the processes of cluster c (gpud standalone with its
// controller and agents, its containerd, the shims; runc and the
// containers' runc init start in their containers' cgroups) into a cpuacct
// cgroup of their own, and returns what reads their CPU time since then:
// the cluster's CPU per job, which the other work on a shared machine
// does not change as much as it does the jobs per second.
func clusterCPU(b *testing.B, c *e2etest.Cluster) func() time.Duration {
	const root = "/sys/fs/cgroup/cpuacct"
	if _, err := os.Stat(filepath.Join(root, "cpuacct.usage")); err != nil {
		b.Logf("no cgroup v1 cpuacct (%v): no cpu-ms/job", err)
		return func() time.Duration { return 0 }
	}
	cg, err := os.MkdirTemp(root, "gpud-bench-")
	if err != nil {
		b.Fatal(err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err == nil && strings.Contains(string(cmd), c.Dir+"/") {
			_ = os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(filepath.Base(p)), 0) // gone meanwhile: no CPU to count
		}
	}
	b.Cleanup(func() { // before the cluster's stop: back to the root cgroup
		var err error
		for try := 0; try < 100; try++ { // processes fork meanwhile
			if raw, rerr := os.ReadFile(filepath.Join(cg, "cgroup.procs")); rerr == nil {
				for _, pid := range strings.Fields(string(raw)) {
					_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0)
				}
			}
			if err = os.Remove(cg); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.Errorf("remove cgroup %s: %v", cg, err)
	})
	return func() time.Duration {
		raw, err := os.ReadFile(filepath.Join(cg, "cpuacct.usage"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(n)
	}
}

// preparedNodeConfig is etc/node.toml with prepared_containers = k.
func preparedNodeConfig(b *testing.B, k int) string {
	return nodeConfigWith(b, "\nprepared_containers = 0\n", fmt.Sprintf("\nprepared_containers = %d\n", k))
}

// nodeConfigWith is etc/node.toml with the line old replaced by new.
func nodeConfigWith(b *testing.B, old, new string) string {
	return e2etest.NodeConfig(b, b.TempDir(), old, new)
}

// submitConcurrently submits n copies of js over the API from 8
// goroutines, as many clients at once would; a refused submission fails
// the benchmark. The benchmarks that need a large queue fill it alike.
func submitConcurrently(b *testing.B, cl *api.Client, js spec.JobSpec, n int64) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= n {
				if _, err := cl.Submit(context.Background(), api.SubmitRequest{Job: js}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkGpuqList100k times the gpuq binary listing a queue of 100,000
// pending jobs (the squeue-like default view) against gpud standalone.
func BenchmarkGpuqList100k(b *testing.B) {
	const n = 100000
	c := e2etest.StartCluster(b, 0)
	work := b.TempDir()
	cl := c.Client()
	js := spec.JobSpec{Name: "queued", Script: "#!/bin/sh\ntrue\n", WorkDir: work, SubmitDir: work, Requeue: true}
	submitConcurrently(b, cl, js, n)
	b.ResetTimer()
	for b.Loop() {
		r := c.CLI(work, "gpuq", "--noheader")
		if r.Code != 0 {
			b.Fatalf("gpuq: exit %d: %s", r.Code, r.Stderr)
		}
		if lines := strings.Count(r.Stdout, "\n"); lines != n {
			b.Fatalf("gpuq listed %d jobs, want %d", lines, n)
		}
	}
}
