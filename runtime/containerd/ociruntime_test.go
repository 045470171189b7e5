package containerd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// isolationProbe prints, from inside a job container, what the kernel says
// about its isolation, "key=value" fields. Its tools are busybox's (the
// host's and the test image's).
const isolationProbe = `B=busybox
echo uid=$($B id -u) gid=$($B id -g) groups=$($B id -G | $B tr ' ' ,)
echo pidns=$($B readlink /proc/self/ns/pid) mntns=$($B readlink /proc/self/ns/mnt) netns=$($B readlink /proc/self/ns/net) utsns=$($B readlink /proc/self/ns/uts) ipcns=$($B readlink /proc/self/ns/ipc)
echo hostname=$($B hostname)
$B grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | $B tr -d ' \t' | $B sed 's/:/=/'
$B grep -E ':(memory|pids|cpu,cpuacct|cpu|devices):' /proc/self/cgroup | $B sed 's/^[0-9]*:\([^:]*\):/cg.\1=/'
test -c /dev/gpud-test0 && echo cdi=yes
echo dev=$($B ls /dev | $B tr '\n' ' ')
echo mounts=$($B awk '{print $5}' /proc/self/mountinfo | $B sort | $B tr '\n' ' ')
if $B touch /gpud-probe 2>/dev/null; then echo root=rw; $B rm -f /gpud-probe; else echo root=ro; fi
echo bind=$($B cat "$MARK")
echo written > "$OUTDIR/written"
`

// isolation runs isolationProbe in a job container of rt (nobody, a CDI
// device, a bind mount, CPU and memory limits) and returns its lines as a
// map, with the host's view of the container's cgroup added (cgroup files
// read after the exit, before the delete) and the files of its OCI
// runtime's state directory.
func isolation(t *testing.T, rt *containerd.Runtime, runcRoot, id, image string) map[string]string {
	t.Helper()
	ctx := context.Background()
	dir := jobDir(t)
	mark := filepath.Join(dir, "mark")
	if err := os.WriteFile(mark, []byte("from-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := hostTask(t, dir, "/bin/sh", "-c", isolationProbe)
	cfg.ID, cfg.Image = id, image
	cfg.Env = []string{"PATH=/usr/bin:/bin", "MARK=" + mark, "OUTDIR=" + dir}
	cfg.CDIDevices = []string{"gpud.test/dev=d0"}
	cfg.Mounts = []runtime.Mount{{Source: dir, Dest: dir}}
	cfg.CPUs, cfg.MemoryBytes = 1.5, 200<<20
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = rt.Delete(ctx, cfg.ID) })
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Fatalf("probe exited %d: %s%s", es.Code, readFile(t, cfg.StdoutPath), readFile(t, cfg.StderrPath))
	}
	got := map[string]string{}
	for line := range strings.Lines(readFile(t, cfg.StdoutPath)) {
		for f := range strings.FieldsSeq(line) {
			if k, v, ok := strings.Cut(f, "="); ok && !strings.HasPrefix(line, "dev=") && !strings.HasPrefix(line, "mounts=") {
				got[k] = v
			}
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && (k == "dev" || k == "mounts") {
			got[k] = v
		}
	}
	got["written.owner"] = fmt.Sprint(owner(t, filepath.Join(dir, "written")))
	got["mounts"] = strings.ReplaceAll(strings.ReplaceAll(got["mounts"], dir, "JOBDIR"), "/"+id+"/", "/CONTAINER/")
	// The host's view of the container's cgroup (named for it, whatever
	// the job sees in a cgroup namespace), with its limits: cgroup v1's
	// files, or v2's (no devices file there: a BPF program).
	hostCG := func(ctl string) string {
		// runtime.go's cgroupsPath: /<namespace>/<scope>-<id>, the scope
		// drawn from the runtime's runc root (unique to this test).
		sum := sha256.Sum256([]byte(runcRoot))
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ctl, containerd.DefaultNamespace, hex.EncodeToString(sum[:4])+"-"+id))
		if len(m) != 1 {
			return ""
		}
		return m[0]
	}
	if cg := hostCG("memory"); cg != "" { // v1
		got["host.cgroup"] = "named for the container"
		got["host.memory.limit"] = strings.TrimSpace(readFile(t, filepath.Join(cg, "memory.limit_in_bytes")))
		if cpu := hostCG("cpu"); cpu != "" {
			got["host.cpu.quota"] = strings.TrimSpace(readFile(t, filepath.Join(cpu, "cpu.cfs_quota_us")))
		}
		if dev := hostCG("devices"); dev != "" {
			got["host.devices"] = strings.Join(strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dev, "devices.list"))), "\n"), ", ")
		}
	} else if cg := hostCG(""); cg != "" { // v2
		got["host.cgroup"] = "named for the container"
		got["host.memory.limit"] = strings.TrimSpace(readFile(t, filepath.Join(cg, "memory.max")))
		got["host.cpu.quota"] = strings.Fields(readFile(t, filepath.Join(cg, "cpu.max")))[0]
		got["host.devices"] = "c 1:3 rwm (cgroup v2: a BPF program, not read)"
	}
	return got
}

// TestOCIRuntimeCrunIsolation runs the same job container under runc and
// under crun (node.toml oci_runtime = "crun"), from an image and on the
// host's root, and checks that crun's has the isolation runc's has: the
// job's uid and gid, a PID, mount, UTS and IPC namespace of its own (the
// host's network, as every job has), its own cgroup named for the
// container with the job's memory and CPU limits, a device cgroup that
// allows only what the spec lists (the CDI device among them), the same
// /dev, the same mount points, the same capabilities, NoNewPrivs and
// seccomp, a root the user cannot write and the job's bind mount; and that
// crun, not runc, made it (crun's status file in the state directory, not
// runc's state.json). A crun before 1.22 must refuse a host-root job,
// saying why (its mounts would land under the host root's bind).
func TestOCIRuntimeCrunIsolation(t *testing.T) {
	containerdtest.RequireCrun(t)
	t.Parallel()
	addr := containerdtest.Start(t)
	cdiDir := writeTestCDI(t)
	ctx := context.Background()
	runcRoot, crunRoot := t.TempDir(), t.TempDir()
	runc, err := containerd.New(ctx, containerd.Options{Address: addr, CDISpecDirs: []string{cdiDir}, RuncRoot: runcRoot})
	if err != nil {
		t.Fatalf("New (runc): %v", err)
	}
	t.Cleanup(func() { runc.Close() })
	crun, err := containerd.New(ctx, containerd.Options{Address: addr, CDISpecDirs: []string{cdiDir}, RuncRoot: crunRoot,
		OCIRuntime: containerdtest.Crun()})
	if err != nil {
		t.Fatalf("New (crun): %v", err)
	}
	t.Cleanup(func() { crun.Close() })
	const ref = "docker.io/gpud/busybox:test"
	var archive bytes.Buffer
	if err := containerd.WriteBusyboxImage(&archive, "/bin/busybox", ref); err != nil {
		t.Fatalf("no static busybox to build an image from: %v", err)
	}
	if _, err := runc.ImportImage(ctx, &archive); err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	out, err := exec.Command(containerdtest.Crun(), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	var major, minor int
	if _, err := fmt.Sscanf(first, "crun version %d.%d", &major, &minor); err != nil {
		t.Fatalf("crun --version: %q: %v", first, err)
	}
	hostRoot := major > 1 || major == 1 && minor >= 22

	for _, image := range []string{ref, runtime.ImageHost} {
		t.Run(strings.Trim(idUnsafe.ReplaceAllString(image, "-"), "-"), func(t *testing.T) {
			if image == runtime.ImageHost && !hostRoot {
				cfg := hostTask(t, jobDir(t), "/bin/true")
				err := crun.Start(ctx, cfg)
				if err == nil || !strings.Contains(err.Error(), "crun#1752") || !strings.Contains(err.Error(), "1.22") {
					t.Errorf("host-root job under %s: Start = %v, want a refusal naming crun#1752 and 1.22", first, err)
				}
				assertGone(t, crun, cfg.ID)
				return
			}
			byRunc := isolation(t, runc, runcRoot, "iso-runc", image)
			byCrun := isolation(t, crun, crunRoot, "iso-crun", image)
			checkIsolation(t, runcRoot, crunRoot, byRunc, byCrun)
		})
	}
}

func checkIsolation(t *testing.T, runcRoot, crunRoot string, byRunc, byCrun map[string]string) {
	t.Helper()
	// Which runtime made each: runc keeps state.json per container, crun
	// a status file (looked at while the exited task is not yet deleted).
	for _, c := range []struct{ root, id, has, hasNot string }{
		{runcRoot, "iso-runc", "state.json", "status"},
		{crunRoot, "iso-crun", "status", "state.json"},
	} {
		files, _ := filepath.Glob(filepath.Join(c.root, "*", c.id, "*")) // <root>/<namespace>/<id>
		var names []string
		for _, f := range files {
			names = append(names, filepath.Base(f))
		}
		if !slices.Contains(names, c.has) || slices.Contains(names, c.hasNot) {
			t.Errorf("state directory %s of %s holds %v; want %s and no %s", c.root, c.id, names, c.has, c.hasNot)
		}
	}
	hostNS := map[string]string{}
	for _, ns := range []string{"pid", "mnt", "net", "uts", "ipc"} {
		hostNS[ns+"ns"], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	for name, got := range map[string]map[string]string{"runc": byRunc, "crun": byCrun} {
		want := map[string]string{"uid": "65534", "gid": "65534", "hostname": "job42", "cdi": "yes",
			"root": "ro", "bind": "from-host", "written.owner": "[65534 65534]", "NoNewPrivs": "1", "CapEff": "0000000000000000",
			"host.memory.limit": fmt.Sprint(200 << 20), "host.cpu.quota": "150000", "netns": hostNS["netns"], "host.cgroup": "named for the container"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, got[k], v)
			}
		}
		for _, ns := range []string{"pidns", "mntns", "utsns", "ipcns"} {
			if got[ns] == "" || got[ns] == hostNS[ns] {
				t.Errorf("%s: %s = %q, want one of its own (host's %s)", name, ns, got[ns], hostNS[ns])
			}
		}
		if got["host.cgroup"] == "" {
			t.Errorf("%s: no cgroup named for the container on the host", name)
		}
		if d := got["host.devices"]; d == "" || slices.Contains(strings.Split(d, ", "), "a *:* rwm") || !slices.Contains(strings.Split(d, ", "), "c 1:3 rwm") {
			t.Errorf("%s: devices.list %q, want a list of allowed devices with /dev/null's (the CDI device) and no a *:* rwm", name, d)
		}
		for _, d := range strings.Fields(got["dev"]) {
			if isHostDevice(d) {
				t.Errorf("%s: /dev/%s is visible in the job", name, d)
			}
		}
	}
	// The same isolation: every key but those naming the container or a
	// namespace, and the runtimes' known differences in their defaults:
	// crun's /dev has a core symlink (to /proc/kcore, which the spec
	// masks); runc's device cgroup allows /dev/net/tun (10:200), crun's
	// /dev/console (5:1), neither of which is in the job's /dev.
	same := func(m map[string]string) map[string]string {
		c := map[string]string{}
		for k, v := range m {
			if !strings.HasPrefix(k, "cg.") && !strings.HasSuffix(k, "ns") {
				c[k] = v
			}
		}
		c["dev"] = strings.Join(slices.DeleteFunc(strings.Fields(c["dev"]), func(d string) bool { return d == "core" }), " ")
		devs := slices.DeleteFunc(strings.Split(c["host.devices"], ", "), func(d string) bool { return d == "c 10:200 rwm" || d == "c 5:1 rwm" })
		slices.Sort(devs)
		c["host.devices"] = strings.Join(devs, ", ")
		return c
	}
	if diff := cmp.Diff(same(byRunc), same(byCrun)); diff != "" {
		t.Errorf("crun's job container differs from runc's (-runc +crun):\n%s", diff)
	}
}

// TestOCIRuntimeCrunShimGroup: under crun with ShimGroupSize 2, a user's
// first image job makes its group's keeper (created under crun on an empty
// root: crun before 1.22 binds no host root) and the second job joins the
// first one's shim; both run until killed.
func TestOCIRuntimeCrunShimGroup(t *testing.T) {
	containerdtest.RequireCrun(t)
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	rt, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 2, Node: "n1", OCIRuntime: containerdtest.Crun()})
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
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nctx := namespaces.WithNamespace(ctx, containerd.DefaultNamespace)
	dir := jobDir(t)
	var cfgs []runtime.TaskConfig
	var shims []int
	for _, name := range []string{"a", "b"} {
		cfg := hostTask(t, dir, "sleep", "300")
		cfg.ID += "-" + name
		cfg.Image, cfg.Env = ref, nil
		cfg.StdoutPath, cfg.StderrPath = "", ""
		if err := rt.Start(ctx, cfg); err != nil {
			t.Fatalf("Start %s: %v", name, err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), cfg.ID) })
		cfgs, shims = append(cfgs, cfg), append(shims, shimOf(t, cfg, c, nctx))
	}
	keepers, err := c.Containers(nctx, `labels."gpud.shim-keeper"==n1`)
	if err != nil {
		t.Fatal(err)
	}
	if len(keepers) != 1 {
		t.Errorf("keepers: %d, want the group's one", len(keepers))
	}
	if shims[0] != shims[1] {
		t.Errorf("shims %v of one user's two jobs (group size 2), want one shared", shims)
	}
	for _, cfg := range cfgs {
		// SIGKILL: a SIGTERM sent before the wrapper shell (its PID
		// namespace's init) has set its trap would be ignored.
		if err := rt.Signal(ctx, cfg.ID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if es := wait(t, rt, cfg.ID); es.Signal != syscall.SIGKILL {
			t.Errorf("%s after SIGKILL: %+v", cfg.ID, es)
		}
	}
}
