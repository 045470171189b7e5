package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A private network of test hosts, each a network namespace, joined by a
// bridge that lives in a namespace of its own: the test touches no
// interface, address or route of the machine it runs on, and the hosts
// reach only each other (10.250.0.0/24) and their own loopback. Faults are
// made on the bridge: a host's cable pulled (SetLink), or loss and delay
// on its link (Netem).

// NetnsPrereq says why network namespaces cannot be made here ("" when
// they can): the multi-host tests need root and iproute2.
func NetnsPrereq() string {
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

// RequireNetns skips loudly without network namespaces, and fails in CI.
func RequireNetns(t *testing.T) {
	t.Helper()
	RequirePrereq(t)
	if reason := NetnsPrereq(); reason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("multi-host e2e: %s (required in CI)", reason)
		}
		t.Skip("SKIP (loud): multi-host e2e needs network namespaces: " + reason)
	}
}

// Net is the bridge namespace and the hosts on it.
type Net struct {
	t      *testing.T
	prefix string // namespace and interface name prefix, unique per run
	sw     string // namespace of the bridge
	hosts  map[string]*Host
}

// Host is one namespace with eth0 at Addr on the bridge.
type Host struct {
	Name, NS, Addr string
	port           string // its veth end on the bridge, in sw
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// NewNet makes the bridge namespace, its name and those of its hosts
// starting with prefix and the test process's pid (two packages' tests
// may run at once); the cleanup removes every namespace it and AddHost
// made (the veths go with them).
func NewNet(t *testing.T, prefix string) *Net {
	t.Helper()
	n := &Net{t: t, prefix: fmt.Sprintf("%s%d", prefix, os.Getpid()%100000), hosts: map[string]*Host{}}
	n.sw = n.prefix + "sw"
	_ = exec.Command("ip", "netns", "del", n.sw).Run() // left by a killed run
	ipCmd(t, "netns", "add", n.sw)
	t.Cleanup(func() {
		for _, h := range n.hosts {
			_ = exec.Command("ip", "netns", "del", h.NS).Run()
		}
		_ = exec.Command("ip", "netns", "del", n.sw).Run()
	})
	ipCmd(t, "-n", n.sw, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", n.sw, "link", "set", "br0", "up")
	return n
}

// AddHost makes namespace name with eth0 at 10.250.0.<octet>/24 on the
// bridge, and its loopback up.
func (n *Net) AddHost(name string, octet int) *Host {
	t := n.t
	t.Helper()
	h := &Host{Name: name, NS: n.prefix + name, Addr: fmt.Sprintf("10.250.0.%d", octet), port: fmt.Sprintf("v%d", octet)}
	_ = exec.Command("ip", "netns", "del", h.NS).Run()
	ipCmd(t, "netns", "add", h.NS)
	n.hosts[name] = h
	ipCmd(t, "-n", n.sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
	ipCmd(t, "-n", n.sw, "link", "set", h.port, "master", "br0")
	ipCmd(t, "-n", n.sw, "link", "set", h.port, "up")
	ipCmd(t, "-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
	ipCmd(t, "-n", h.NS, "link", "set", "eth0", "up")
	ipCmd(t, "-n", h.NS, "link", "set", "lo", "up")
	return h
}

// SetLink takes host's cable out of the bridge (up=false) or puts it back:
// frames to and from it are dropped, nothing is refused or reset, as when
// a switch port or cable fails.
func (n *Net) SetLink(h *Host, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	ipCmd(n.t, "-n", n.sw, "link", "set", h.port, state)
}

// TryNetem puts netem (tc-netem(8): e.g. "loss 10% delay 100ms 20ms")
// on both directions of host's link: on its eth0 (what it sends) and on
// its port of the bridge (what it receives); "" takes it off again. It
// fails where the kernel has no sch_netem (some VM kernels).
func (n *Net) TryNetem(h *Host, spec string) error {
	for _, at := range [][2]string{{h.NS, "eth0"}, {n.sw, h.port}} {
		_ = exec.Command("tc", "-n", at[0], "qdisc", "del", "dev", at[1], "root").Run()
		if spec == "" {
			continue
		}
		args := append([]string{"-n", at[0], "qdisc", "add", "dev", at[1], "root", "netem"}, strings.Fields(spec)...)
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("tc %s: %v: %s (netem needs the kernel's sch_netem)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// Command is name with args run inside host's network namespace. Not `ip
// netns exec`: that also gives the process a mount namespace with a fresh
// /sys, without /sys/fs/cgroup, where runc cannot make a container's
// cgroup. nsenter (util-linux) enters only the network namespace and
// execs, so the pid is the command's own.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.NS, "--", name}, args...)...)
}
