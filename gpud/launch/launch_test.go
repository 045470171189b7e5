package launch

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/cpubind"
)

// TestMain runs the launcher when the test binary is started as one.
func TestMain(m *testing.M) {
	if os.Getenv("GPUD_LAUNCH_TEST") == "1" {
		os.Exit(Main(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// launcher runs the test binary as the launcher with args and returns
// its output.
func launcher(t *testing.T, args []string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GPUD_LAUNCH_TEST=1", "PATH=/usr/bin:/bin")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func allowed(t *testing.T) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var out []int
	for c := range 1024 {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// TestBindAndExec: the launcher binds itself, prints Slurm's verbose line,
// sets SLURM_CPU_BIND*, and execs the program in place, which reads its
// binding from /proc/self/status.
func TestBindAndExec(t *testing.T) {
	cpus := allowed(t)
	if len(cpus) < 2 {
		t.Skipf("SKIP (loud): binding needs 2 CPUs, this process may use %v", cpus)
	}
	last := cpus[len(cpus)-1]
	args := Args("", Opts{CPUBind: "verbose,map_cpu:" + itoa(last), Local: 0, NLocal: 1, Task: 3, Node: "n1"},
		[]string{"sh", "-c", `grep Cpus_allowed_list /proc/self/status; echo "$SLURM_CPU_BIND"`})[2:]
	out, err := launcher(t, args)
	if err != nil {
		t.Fatalf("launcher: %v\n%s", err, out)
	}
	for _, want := range []string{
		"cpu-bind=MAP  - n1, task  3  0 [",
		"]: mask 0x" + cpubind.Format([]int{last}) + " set\n",
		"Cpus_allowed_list:\t" + itoa(last) + "\n",
		"\nverbose,map_cpu:" + itoa(last) + "\n", // SLURM_CPU_BIND
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestCoresDisjoint: four local tasks bound to cores get four disjoint
// core sets where the machine has four cores (two tasks share otherwise).
func TestCoresDisjoint(t *testing.T) {
	cpus := allowed(t)
	topo, err := cpubind.ReadTopology("/sys")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for local := range 4 {
		out, err := launcher(t, Args("", Opts{CPUBind: "cores", Local: local, NLocal: 4, Task: local},
			[]string{"sh", "-c", "grep Cpus_allowed_list /proc/self/status"})[2:])
		if err != nil {
			t.Fatalf("task %d: %v\n%s", local, err, out)
		}
		list := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "Cpus_allowed_list:"))
		got, err := cpubind.ParseList(list)
		if err != nil {
			t.Fatalf("task %d: %q: %v", local, out, err)
		}
		want, _ := cpubind.Mask(topo, cpus, cpubind.Bind{Type: cpubind.Cores}, "", cpubind.Dist{Sockets: "cyclic"}, cpubind.Task{Local: local, NLocal: 4})
		if !slices.Equal(got, want) {
			t.Errorf("task %d bound to %v, want %v", local, got, want)
		}
		seen[list]++
	}
	cores := map[[2]int]bool{}
	for _, c := range topo {
		if slices.Contains(cpus, c.ID) {
			cores[[2]int{c.Socket, c.Core}] = true
		}
	}
	if len(cores) >= 4 && len(seen) != 4 {
		t.Errorf("%d cores but the four tasks' core sets are not disjoint: %v", len(cores), seen)
	}
	t.Logf("%d cores: core sets %v", len(cores), seen)
}

// TestPMIFD: the launcher hands the program a connected PMI socket as
// PMI_FD.
func TestPMIFD(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pmi.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
	}()
	out, err := launcher(t, Args("", Opts{PMISock: sock, NLocal: 1}, []string{"sh", "-c", `echo "cmd=init pmi_version=1 pmi_subversion=1" >&$PMI_FD`})[2:])
	if err != nil {
		t.Fatalf("launcher: %v\n%s", err, out)
	}
	select {
	case line := <-got:
		if line != "cmd=init pmi_version=1 pmi_subversion=1\n" {
			t.Errorf("the PMI server read %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came over PMI_FD")
	}
}

// TestNotFound: a missing program is slurmstepd's failed execve, exit 2.
func TestNotFound(t *testing.T) {
	out, err := launcher(t, Args("", Opts{NLocal: 1}, []string{"no-such-program-gpud"})[2:])
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out, "execve(): no-such-program-gpud") {
		t.Errorf("missing program: %v %q", err, out)
	}
}

func itoa(n int) string { return cpubind.List([]int{n}) }
