package containerd_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// defaultCaps is containerd's default capability set (CHOWN DAC_OVERRIDE
// FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP SETPCAP
// NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE) as /proc/self/status
// prints it.
const defaultCaps = "00000000a80425fb"

// TestJobContainerIsConfined runs real containers on the host image and
// reads, from inside, what the kernel says about them: a user job holds
// no capability (CapEff/CapPrm/CapInh/CapAmb all zero) and a root job no
// more than the default set; both have NoNewPrivs; the host's root is not
// writable for a user job (its permissions: the root is writable under
// the job's uid, as on a Slurm node) nor for a root job on a node whose
// host root is read-only (HostRootReadOnly); /dev has none of the host's
// disks or GPUs.
func TestJobContainerIsConfined(t *testing.T) {
	t.Parallel()
	// The /dev check means something only if the host has such devices
	// (/dev/mem and /dev/kmsg exist on every Linux host).
	host, err := os.ReadDir("/dev")
	if err != nil {
		t.Fatal(err)
	}
	var hostDevs []string
	for _, e := range host {
		if isHostDevice(e.Name()) {
			hostDevs = append(hostDevs, e.Name())
		}
	}
	if len(hostDevs) == 0 {
		t.Fatal("the host's /dev has no disk, GPU or memory device to hide; the check would be vacuous")
	}
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()
	script := `grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
if touch /gpud-confine-probe 2>/dev/null; then echo root=rw; rm -f /gpud-confine-probe; else echo root=ro; fi
if touch /usr/gpud-confine-probe 2>/dev/null; then echo usr=rw; rm -f /usr/gpud-confine-probe; else echo usr=ro; fi
echo dev=$(ls /dev | tr '\n' ' ')`
	for _, tc := range []struct {
		name string
		uid  uint32
		ro   bool
		want map[string]string
	}{
		{"user", nobody, false, map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
			"CapBnd": defaultCaps, "CapAmb": "0000000000000000", "NoNewPrivs": "1"}},
		{"root", 0, true, map[string]string{"CapInh": "0000000000000000", "CapPrm": defaultCaps, "CapEff": defaultCaps,
			"CapBnd": defaultCaps, "CapAmb": "0000000000000000", "NoNewPrivs": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := jobDir(t)
			cfg := hostTask(t, dir, "/bin/sh", "-c", script)
			cfg.UID, cfg.GID = tc.uid, tc.uid
			cfg.HostRootReadOnly = tc.ro
			cfg.Mounts = []runtime.Mount{{Source: dir, Dest: dir}}
			if err := rt.Start(ctx, cfg); err != nil {
				t.Fatalf("Start: %v", err)
			}
			if es := wait(t, rt, cfg.ID); es.Code != 0 {
				t.Fatalf("probe exited %d: %s%s", es.Code, readFile(t, cfg.StdoutPath), readFile(t, cfg.StderrPath))
			}
			t.Cleanup(func() { _ = rt.Delete(ctx, cfg.ID) })
			out := readFile(t, cfg.StdoutPath)
			got := map[string]string{}
			for line := range strings.Lines(out) {
				k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
				if _, ok := tc.want[k]; ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q\n%s", k, got[k], v, out)
				}
			}
			for _, w := range []string{"root=ro", "usr=ro"} {
				if !strings.Contains(out, w) {
					t.Errorf("the host root is writable from the job (read-only root %v; want %s):\n%s", tc.ro, w, out)
				}
			}
			_, dev, _ := strings.Cut(out, "dev=")
			for _, name := range strings.Fields(dev) {
				if isHostDevice(name) {
					t.Errorf("/dev/%s is visible in the job: %s", name, dev)
				}
			}
		})
	}
}

// isHostDevice says whether a /dev entry is a host disk, GPU or other
// device a job without it must not see (the job's own are injected by CDI).
func isHostDevice(name string) bool {
	for _, p := range []string{"sd", "nvme", "vd", "xvd", "loop", "dm-", "nvidia", "dri", "infiniband", "kvm", "mem", "kmsg", "port"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
