package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// TestCrunJobs runs a real gpud standalone with node.toml oci_runtime =
// "crun": a user's job with an image runs to COMPLETED under crun (crun's
// state file, not runc's, for its container while it runs) as the user's
// uid, in a PID namespace and a cgroup of its own, and its output reaches
// the user's file. A job on the host's root runs too with crun 1.22 or
// later; with an older crun (Debian 12's 1.8.1) it fails before it starts,
// saying why (containers/crun#1752) instead of running with its mounts
// hidden under the host root's bind.
func TestCrunJobs(t *testing.T) {
	containerdtest.RequireCrun(t)
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice := e2etest.AddUserTag(t, "cr")
	dir := e2etest.ShortTempDir(t)
	confPath := e2etest.NodeConfig(t, dir, "\noci_runtime = \"runc\"\n", fmt.Sprintf("\noci_runtime = %q\n", containerdtest.Crun()))
	c := e2etest.StartCluster(t, 1, "--cpus", "4", "--node-config", confPath, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(c.Dir, "containerd"))})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	const ref = "docker.io/gpud/busybox:test"
	var archive bytes.Buffer
	if err := containerd.WriteBusyboxImage(&archive, "/bin/busybox", ref); err != nil {
		t.Fatalf("no static busybox to build an image from: %v", err)
	}
	if _, err := rt.ImportImage(ctx, &archive); err != nil {
		t.Fatalf("ImportImage: %v", err)
	}

	// The job prints, then waits for the test to have looked at its
	// container's runtime state.
	gate := filepath.Join(alice.Home, "go")
	id := submitAs(t, c, alice, "--image="+ref, "-o", filepath.Join(alice.Home, "crun-%j.out"), "--wrap",
		`id -u; busybox readlink /proc/self/ns/pid; while ! test -e `+gate+`; do sleep 0.1; done`)
	outPath := filepath.Join(alice.Home, "crun-"+id+".out")
	e2etest.WaitFor(t, time.Minute, "job "+id+"'s output", func() bool {
		b, _ := os.ReadFile(outPath)
		return strings.Count(string(b), "\n") >= 2
	})
	var ctrID string
	e2etest.WaitFor(t, 30*time.Second, "job "+id+"'s container", func() bool {
		all, err := rt.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range all {
			if ti.Labels["gpud.job"] == id {
				ctrID = ti.ID
			}
		}
		return ctrID != ""
	})
	// The runtime's state directory: crun's status file, never runc's
	// state.json (the runc shim runs the binary oci_runtime names).
	root := containerd.DefaultRuncRoot(containerd.SocketPath(filepath.Join(c.Dir, "containerd")))
	crunState, _ := filepath.Glob(filepath.Join(root, "*", ctrID, "status"))
	runcState, _ := filepath.Glob(filepath.Join(root, "*", ctrID, "state.json"))
	if len(crunState) != 1 || len(runcState) != 0 {
		t.Errorf("container %s of job %s: crun state %v, runc state %v; want crun's alone", ctrID, id, crunState, runcState)
	}
	// Its cgroup, on the host: named for the container (runtime.go's
	// /<namespace>/<scope>-<id>, the scope drawn from the runc root),
	// holding the job's processes (cgroup v1's memory hierarchy, or v2).
	sum := sha256.Sum256([]byte(root))
	name := filepath.Join(containerd.DefaultNamespace, hex.EncodeToString(sum[:4])+"-"+ctrID)
	procs, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", name, "cgroup.procs"))
	if err != nil {
		procs, err = os.ReadFile(filepath.Join("/sys/fs/cgroup", name, "cgroup.procs"))
	}
	if err != nil || len(strings.Fields(string(procs))) == 0 {
		t.Errorf("cgroup %s of job %s: %q, %v; want the job's processes", name, id, procs, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.WaitState(id, time.Minute, "COMPLETED")
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
	if len(lines) != 2 || lines[0] != strconv.Itoa(int(alice.UID)) || !strings.HasPrefix(lines[1], "pid:[") || lines[1] == hostNS {
		t.Errorf("job %s printed %q; want uid %d and a PID namespace of its own (host's %s)", id, lines, alice.UID, hostNS)
	}

	// On the host's root.
	v, err := exec.Command(containerdtest.Crun(), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(v), "\n")
	var major, minor int
	if _, err := fmt.Sscanf(first, "crun version %d.%d", &major, &minor); err != nil {
		t.Fatalf("crun --version: %q: %v", first, err)
	}
	host := submitAs(t, c, alice, "-o", filepath.Join(alice.Home, "host-%j.out"), "--wrap", "id -u")
	if major > 1 || major == 1 && minor >= 22 {
		c.WaitState(host, time.Minute, "COMPLETED")
		return
	}
	j := c.WaitState(host, time.Minute, "FAILED", "COMPLETED")
	if j["state"] != "FAILED" || !strings.Contains(strings.Join([]string{fmt.Sprint(j["reason"]), c.Log.String()}, " "), "crun#1752") {
		t.Errorf("host-root job %s under %s: state %v reason %v; want FAILED, saying why (containers/crun#1752)", host, first, j["state"], j["reason"])
	}
}
