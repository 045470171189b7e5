package steps

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// stepJob starts a job holding nodes nodes (sleeping) and returns the
// path of its step socket on the first node, as srun inside it sees it.
func stepJob(b testing.TB, c *e2etest.Cluster, nodes int) string {
	b.Helper()
	work := b.TempDir()
	r := c.CLI(work, "gpusubmit", "--parsable", "-N", fmt.Sprint(nodes), "--wrap", "sleep 600")
	if r.Code != 0 {
		b.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 60*time.Second, "RUNNING")
	sock := filepath.Join(c.Dir, "nodes", "node1", "jobs", "gpud-"+id+"-1-node1", "step.sock")
	waitStep(b, sock, nodes)
	return sock
}

// waitStep waits until a step over nodes nodes runs through sock (the
// socket is there before the containers start).
func waitStep(b testing.TB, sock string, nodes int) {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := srunCmd(sock, "-N", fmt.Sprint(nodes), "true").CombinedOutput()
		if err == nil {
			return
		} else if time.Now().After(deadline) {
			b.Fatalf("no step ran through %s: %v: %s", sock, err, out)
		}
	}
}

// srunCmd is bin/srun talking to the job's step socket, as in the job.
func srunCmd(sock string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e2etest.BinDir, "srun"), args...)
	cmd.Env = append(os.Environ(), api.EnvStepSocket+"="+sock)
	// The step's tasks start in srun's directory. The test's own (the
	// package's, in the checkout) is not in a job whose checkout lies
	// under /tmp (jobs get a private /tmp), and the task then says so
	// before its output (slurmstepd's "couldn't chdir" line); "/" is in
	// every job. Tests about directories set their own.
	cmd.Dir = "/"
	return cmd
}

// BenchmarkSrunTrue runs `srun -n1 true` in a running two-node job: a
// whole step (request, layout, containerd exec, exit, reply), including
// srun's own start. Slurm 22.05 takes 0.099 s here.
func BenchmarkSrunTrue(b *testing.B) {
	c := e2etest.StartCluster(b, 2)
	sock := stepJob(b, c, 2)
	for b.Loop() {
		if out, err := srunCmd(sock, "-n1", "true").CombinedOutput(); err != nil {
			b.Fatalf("srun -n1 true: %v: %s", err, out)
		}
	}
}

// BenchmarkSrunFanout64 runs one step of 64 tasks over 4 nodes.
func BenchmarkSrunFanout64(b *testing.B) {
	c := e2etest.StartCluster(b, 4)
	sock := stepJob(b, c, 4)
	for b.Loop() {
		out, err := srunCmd(sock, "-n64", "-N4", "-l", "true").CombinedOutput()
		if err != nil {
			b.Fatalf("srun -n64 -N4 true: %v: %s", err, out)
		}
	}
}

// BenchmarkSrunStdout streams 64 MiB of one task's stdout to srun and
// reports MB/s.
func BenchmarkSrunStdout(b *testing.B) {
	c := e2etest.StartCluster(b, 1)
	sock := stepJob(b, c, 1)
	const size = 64 << 20
	var total int64
	start := time.Now()
	for b.Loop() {
		cmd := srunCmd(sock, "-n1", "head", "-c", fmt.Sprint(size), "/dev/zero")
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("srun head: %v", err)
		}
		if out.Len() != size {
			b.Fatalf("srun passed on %d bytes of %d", out.Len(), size)
		}
		total += size
	}
	b.ReportMetric(float64(total)/1e6/time.Since(start).Seconds(), "MB/s")
}
