package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/runtime/rdma"
)

// TestRDMAPairedNICs runs --rdma jobs on a mock DGX H100 node whose fake
// sysfs has four NICs, two per NUMA node (the mock GPUs' bus IDs: 18, 2a,
// 3a, 5d on node 0, 9a, ab, ba, db on node 1; mlx5_0 shares GPU 0's PCIe
// switch, GPU 1's switch has no NIC).
func TestRDMAPairedNICs(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	sysfs := t.TempDir()
	gpus := []rdma.FakePCIDevice{
		{PCIPath: "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", NUMANode: 0},
		{PCIPath: "pci0000:27/0000:27:01.0/0000:28:00.0/0000:29:00.0/0000:2a:00.0", NUMANode: 0},
		{PCIPath: "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:00.0/0000:3a:00.0", NUMANode: 0},
		{PCIPath: "pci0000:5b/0000:5b:01.0/0000:5d:00.0", NUMANode: 0},
		{PCIPath: "pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:00.0/0000:9a:00.0", NUMANode: 1},
		{PCIPath: "pci0000:a7/0000:a7:01.0/0000:a8:00.0/0000:a9:00.0/0000:ab:00.0", NUMANode: 1},
		{PCIPath: "pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:00.0/0000:ba:00.0", NUMANode: 1},
		{PCIPath: "pci0000:d7/0000:d7:01.0/0000:db:00.0", NUMANode: 1},
	}
	nics := []rdma.FakeNIC{
		{Name: "mlx5_0", FakePCIDevice: rdma.FakePCIDevice{PCIPath: "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0", NUMANode: 0}, Uverbs: 0},
		{Name: "mlx5_1", FakePCIDevice: rdma.FakePCIDevice{PCIPath: "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:01.0/0000:3b:00.0", NUMANode: 0}, Uverbs: 1},
		{Name: "mlx5_2", FakePCIDevice: rdma.FakePCIDevice{PCIPath: "pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:01.0/0000:9b:00.0", NUMANode: 1}, Uverbs: 2},
		{Name: "mlx5_3", FakePCIDevice: rdma.FakePCIDevice{PCIPath: "pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:01.0/0000:bb:00.0", NUMANode: 1}, Uverbs: 3},
	}
	if err := rdma.WriteFakeSysfs(sysfs, gpus, nics); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--rdma-sysfs", sysfs, "--cpus", "16", "--mem", "16G", "--kill-grace", "2s")
	work := t.TempDir()
	script := `echo "hca=$NCCL_IB_HCA memlock=$(ulimit -l)"; ls /dev/infiniband | tr '\n' ' '; echo`
	// Jobs get unlimited locked memory, or the node's own hard limit where
	// the node may not raise it (an unprivileged container running CI).
	memlock := "unlimited"
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil && rl.Max != unix.RLIM_INFINITY {
		memlock = strconv.FormatUint(rl.Max/1024, 10)
	}

	run := func(t *testing.T, wantHCA, wantDevs string) {
		t.Helper()
		r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "--gpus=2", "--rdma", "--output", "rdma-%j.out", "--wrap", script)
		if r.Code != 0 {
			t.Fatalf("gpusubmit --rdma: exit %d: %s", r.Code, r.Stderr)
		}
		out, err := os.ReadFile(filepath.Join(work, "rdma-"+strings.TrimSpace(r.Stdout)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(out), "\n")
		if want := "hca=" + wantHCA + " memlock=" + memlock; lines[0] != want {
			t.Errorf("job saw %q, want %q", lines[0], want)
		}
		if got := strings.TrimSpace(lines[1]); got != wantDevs {
			t.Errorf("/dev/infiniband holds %q, want %q", got, wantDevs)
		}
	}
	t.Run("GPUs 0-1 get the NICs of NUMA node 0", func(t *testing.T) {
		run(t, "mlx5_0,mlx5_1", "rdma_cm uverbs0 uverbs1")
	})
	t.Run("GPUs 4-5 get the NICs of NUMA node 1", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--parsable", "--gpus=4", "--output", "hold-%j.out", "--wrap", "sleep 600")
		if r.Code != 0 {
			t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
		c.WaitState(strings.TrimSpace(r.Stdout), 60*time.Second, "RUNNING") // holds GPUs 0-3
		run(t, "mlx5_2,mlx5_3", "rdma_cm uverbs2 uverbs3")
	})
	// The node's health loop reads the NICs with every sample (10 s here):
	// a port that goes DOWN takes its NIC out of service; a job asking for
	// all four NICs waits while jobs without RDMA still run on the node;
	// the port back ACTIVE for probe_after (1 minute here) readmits the NIC
	// and the job starts.
	t.Run("a NIC whose port goes down is drained and readmitted", func(t *testing.T) {
		state := filepath.Join(sysfs, "class", "infiniband", "mlx5_3", "ports", "1", "state")
		nodes := func() string { return c.CLI(work, "gpuq", "nodes", "--json").Stdout }
		if err := os.WriteFile(state, []byte("1: DOWN\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e2etest.WaitFor(t, 30*time.Second, "the NIC's mark on the node", func() bool {
			return strings.Contains(nodes(), "gpud:nic-down mlx5_3 port 1 DOWN")
		})
		r := c.CLI(work, "gpusubmit", "--parsable", "--gpus=1", "--rdma=4", "--output", "rdma4-%j.out", "--wrap", "true")
		if r.Code != 0 {
			t.Fatalf("gpusubmit --rdma=4: exit %d: %s", r.Code, r.Stderr)
		}
		all := strings.TrimSpace(r.Stdout)
		// A job without RDMA, submitted after, runs and ends meanwhile.
		if r := c.CLI(work, "gpusubmit", "--wait", "--gpus=1", "--output", "plain-%j.out", "--wrap", "true"); r.Code != 0 {
			t.Fatalf("gpusubmit without RDMA: exit %d: %s", r.Code, r.Stderr)
		}
		if st := c.CLI(work, "gpuq", "show", all).Stdout; !strings.Contains(st, "PENDING") {
			t.Fatalf("the --rdma=4 job is not pending while a NIC is out:\n%s", st)
		}
		if err := os.WriteFile(state, []byte("4: ACTIVE\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c.WaitState(all, 180*time.Second, "COMPLETED")
		if n := nodes(); strings.Contains(n, "nic-down") {
			t.Errorf("the NIC's mark stayed after its readmission: %s", n)
		}
	})
}
