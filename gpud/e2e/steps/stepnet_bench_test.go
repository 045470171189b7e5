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

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// Steps over the nodes' step listeners (TLS) against the in-process
// registry gpud standalone uses by default: each benchmark runs under
// both (sub-benchmarks inproc and network).
func stepModes(b *testing.B, run func(b *testing.B, extra ...string)) {
	b.Run("inproc", func(b *testing.B) { run(b) })
	b.Run("network", func(b *testing.B) { run(b, "--steps-over-network") })
}

// BenchmarkSrunN2True runs `srun -N2 true` in a two-node job: one task on
// srun's node, one on the other, started by its agent.
func BenchmarkSrunN2True(b *testing.B) {
	stepModes(b, func(b *testing.B, extra ...string) {
		c := e2etest.StartCluster(b, 2, extra...)
		sock := stepJob(b, c, 2)
		for b.Loop() {
			if out, err := srunCmd(sock, "-N2", "true").CombinedOutput(); err != nil {
				b.Fatalf("srun -N2 true: %v: %s", err, out)
			}
		}
	})
}

// BenchmarkSrunFanout64Nodes4 is one step of 64 tasks over 4 nodes.
func BenchmarkSrunFanout64Nodes4(b *testing.B) {
	stepModes(b, func(b *testing.B, extra ...string) {
		c := e2etest.StartCluster(b, 4, extra...)
		sock := stepJob(b, c, 4)
		for b.Loop() {
			if out, err := srunCmd(sock, "-n64", "-N4", "true").CombinedOutput(); err != nil {
				b.Fatalf("srun -n64 -N4 true: %v: %s", err, out)
			}
		}
	})
}

// BenchmarkSrunStdoutRemote streams 64 MiB of stdout from a task on the
// job's second node (relayed by the first node's agent) and reports MB/s.
func BenchmarkSrunStdoutRemote(b *testing.B) {
	stepModes(b, func(b *testing.B, extra ...string) {
		c := e2etest.StartCluster(b, 2, extra...)
		sock := stepJob(b, c, 2)
		const size = 64 << 20
		var total int64
		start := time.Now()
		for b.Loop() {
			cmd := srunCmd(sock, "-N2", "bash", "-c", fmt.Sprintf("[ $SLURM_NODEID = 1 ] && exec head -c %d /dev/zero; true", size))
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
	})
}

// BenchmarkSrunTicketTrue runs `srun -n1 true` from outside the job (a
// salloc shell: SLURM_JOB_ID, no step socket): step ticket from the
// controller, TLS to the first node's step listener, the step.
func BenchmarkSrunTicketTrue(b *testing.B) {
	c := e2etest.StartCluster(b, 2)
	sock := stepJob(b, c, 2)
	// The job id from the socket's path (jobs/gpud-<id>-1-node1/step.sock).
	id := strings.Split(filepath.Base(filepath.Dir(sock)), "-")[1]
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "GPUD_STEP_SOCKET=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GPUD_CONTROLLER="+c.Addr, "SLURM_JOB_ID="+id)
	for b.Loop() {
		cmd := exec.Command(filepath.Join(e2etest.BinDir, "srun"), "-n1", "true")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("srun -n1 true with a ticket: %v: %s", err, out)
		}
	}
}
