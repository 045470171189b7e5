package multihost

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// A private network of test hosts, each a network namespace, joined by a
// bridge that lives in a namespace of its own: the test touches no
// interface, address or route of the machine it runs on, and the hosts
// reach only each other (10.250.0.0/24) and their own loopback.

// netnsPrereq says why network namespaces cannot be made here ("" when
// they can): the multi-host test needs root and iproute2.
func netnsPrereq() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip not found on PATH (apt-get install iproute2)"
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return "nsenter not found on PATH (apt-get install util-linux)"
	}
	probe := fmt.Sprintf("gpudprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	return ""
}

// requireNetns skips loudly without network namespaces, and fails in CI.
func requireNetns(t *testing.T) {
	t.Helper()
	e2etest.RequirePrereq(t)
	if reason := netnsPrereq(); reason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("multi-host e2e: %s (required in CI)", reason)
		}
		t.Skip("SKIP (loud): multi-host e2e needs network namespaces: " + reason)
	}
}

// testNet is the bridge namespace and the hosts on it.
type testNet struct {
	t      *testing.T
	prefix string // namespace and interface name prefix, unique per run
	sw     string // namespace of the bridge
	hosts  map[string]*testHost
}

// testHost is one namespace with eth0 at addr on the bridge.
type testHost struct {
	name, ns, addr string
	port           string // its veth end on the bridge, in sw
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newTestNet makes the bridge namespace; the cleanup removes every
// namespace it and addHost made (the veths go with them).
func newTestNet(t *testing.T) *testNet {
	t.Helper()
	n := &testNet{t: t, prefix: fmt.Sprintf("gmh%d", os.Getpid()%100000), hosts: map[string]*testHost{}}
	n.sw = n.prefix + "sw"
	_ = exec.Command("ip", "netns", "del", n.sw).Run() // left by a killed run
	ipCmd(t, "netns", "add", n.sw)
	t.Cleanup(func() {
		for _, h := range n.hosts {
			_ = exec.Command("ip", "netns", "del", h.ns).Run()
		}
		_ = exec.Command("ip", "netns", "del", n.sw).Run()
	})
	ipCmd(t, "-n", n.sw, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", n.sw, "link", "set", "br0", "up")
	return n
}

// addHost makes namespace name with eth0 at 10.250.0.<octet>/24 on the
// bridge, and its loopback up.
func (n *testNet) addHost(name string, octet int) *testHost {
	t := n.t
	t.Helper()
	h := &testHost{name: name, ns: n.prefix + name, addr: fmt.Sprintf("10.250.0.%d", octet), port: fmt.Sprintf("v%d", octet)}
	_ = exec.Command("ip", "netns", "del", h.ns).Run()
	ipCmd(t, "netns", "add", h.ns)
	n.hosts[name] = h
	ipCmd(t, "-n", n.sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
	ipCmd(t, "-n", n.sw, "link", "set", h.port, "master", "br0")
	ipCmd(t, "-n", n.sw, "link", "set", h.port, "up")
	ipCmd(t, "-n", h.ns, "addr", "add", h.addr+"/24", "dev", "eth0")
	ipCmd(t, "-n", h.ns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", h.ns, "link", "set", "lo", "up")
	return h
}

// setLink takes host's cable out of the bridge (up=false) or puts it back.
func (n *testNet) setLink(h *testHost, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	ipCmd(n.t, "-n", n.sw, "link", "set", h.port, state)
}

// command is name with args run inside host's network namespace. Not `ip
// netns exec`: that also gives the process a mount namespace with a fresh
// /sys, without /sys/fs/cgroup, where runc cannot make a container's
// cgroup. nsenter (util-linux) enters only the network namespace and
// execs, so the pid is the command's own.
func (h *testHost) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.ns, "--", name}, args...)...)
}
