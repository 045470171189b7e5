package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// GPUBackends are the values of [node] gpus. runtime/gpu/nvml.Backends
// lists the same; config must not import it (see doc.go).
var GPUBackends = []string{"auto", "nvml", "none", "mock:dgx-a100", "mock:dgx-h100", "mock:dgx-h200"}

// Node is node.toml, a node agent's configuration.
type Node struct {
	Version int         `toml:"version"`
	Node    NodeSection `toml:"node"`
	Health  Health      `toml:"health"`
}

// NodeSection is [node].
type NodeSection struct {
	// Name is the node's name in the cluster; empty means the hostname
	// (see NodeName).
	Name string `toml:"name"`
	// Controller is the controller's address: unix:///path.sock or
	// https://host:port, or a comma-separated list of the addresses of
	// an HA controller group, whose leader the agent follows.
	Controller string `toml:"controller"`
	// Address is where other nodes reach this one (a job's MASTER_ADDR
	// when this node is its rank 0); empty means the hostname.
	Address string `toml:"address"`
	// CAFile is the controller's CA certificate for https (empty: GPUD_CA
	// or ~/.config/gpud/ca.pem, else the system roots).
	CAFile string `toml:"ca_file"`
	// JoinTokenFile holds the cluster's join token (gpud token join) with
	// which the agent gets its node certificate on first start over https;
	// the certificate is kept in state_dir/tls.
	JoinTokenFile string `toml:"join_token_file"`
	StateDir      string `toml:"state_dir"`
	// GPUs selects the GPU backend, one of GPUBackends.
	GPUs string `toml:"gpus"`
	// CPUs offered to jobs; 0 detects.
	CPUs int `toml:"cpus"`
	// Mem offered to jobs, like "512G"; empty detects (see MemMiB).
	Mem      string   `toml:"mem"`
	Features []string `toml:"features"`
	// HostRoot is how jobs on the host's root see it, one of HostRoots.
	HostRoot string `toml:"host_root"`
	// PrivateTmp gives each job an empty /tmp of its own (Slurm's
	// job_container/tmpfs); false shares the node's.
	PrivateTmp bool `toml:"private_tmp"`
	// Mounts are the site's shared filesystems ("/home", "/scratch"),
	// bound read-write at their own path into jobs on the host's root.
	Mounts []string `toml:"mounts"`
	// CDIDir is where the node writes the CDI spec of its GPUs.
	CDIDir            string `toml:"cdi_dir"`
	ContainerdAddress string `toml:"containerd_address"`
	// DefaultImage runs jobs that name no image: "host" (the node's root
	// filesystem, read-only) or an image reference.
	DefaultImage string `toml:"default_image"`
	// KillGrace is the wait between SIGTERM and SIGKILL.
	KillGrace      Duration `toml:"kill_grace"`
	CheckpointRoot string   `toml:"checkpoint_root"`
	// CheckpointTimeout is how long a job has to complete a checkpoint
	// after the signal; a checkpoint-first stop (requeue, checkpoint-mode
	// preemption, drain) then goes ahead without one.
	CheckpointTimeout Duration `toml:"checkpoint_timeout"`
	// MetricsListen is the host:port the agent serves Prometheus /metrics
	// on (per-GPU DCGM-style gauges); empty serves none.
	MetricsListen string `toml:"metrics_listen"`
	// StepListen is the host:port of the agent's step listener (TLS with
	// the node certificate): peer agents start their shares of steps
	// there, and srun from outside a job's containers starts steps with
	// the allocation's step ticket. Served only by a node that joined
	// with the join token (its certificate is its identity); "" serves
	// none (steps then stay within this node). Port 0 picks a free one.
	StepListen string `toml:"step_listen"`
	// MIG is the MIG mode of the node's MIG-capable GPUs, one of MIGModes:
	// "off" leaves MIG mode as the driver has it and offers no slices;
	// "static" offers the instances an admin made; "dynamic" lets the
	// scheduler plan instances, which the node creates for each job and
	// destroys after it.
	MIG string `toml:"mig"`
	// MIGGPUs overrides MIG per GPU index ("0" = "static").
	MIGGPUs map[string]string `toml:"mig_gpus"`
	// RDMASysfs is the sysfs root RDMA NICs and their PCIe/NUMA
	// placement are read from: "/sys", or a fake tree for mock nodes
	// (whose /dev/infiniband nodes are then made under the state dir).
	RDMASysfs string `toml:"rdma_sysfs"`
	// UsageInterval is how often each running job's usage (GPU
	// utilisation, memory, power; cgroup CPU and memory) is sampled for
	// accounting; "0s" samples nothing.
	UsageInterval Duration `toml:"usage_interval"`
}

// HostRoots are the values of [node] host_root.
var HostRoots = []string{"writable", "read-only"}

// MIGModes are the values of [node] mig and mig_gpus.
var MIGModes = []string{"off", "static", "dynamic"}

// MIGModeOf returns the MIG mode of GPU index i. Valid after Validate.
func (s NodeSection) MIGModeOf(i int) string {
	if m, ok := s.MIGGPUs[strconv.Itoa(i)]; ok {
		return m
	}
	return s.MIG
}

// Health is [health]: when a GPU counts as unhealthy.
type Health struct {
	// GPUTempMaxC held for GPUTempSustain drains the GPU.
	GPUTempMaxC    int      `toml:"gpu_temp_max_c"`
	GPUTempSustain Duration `toml:"gpu_temp_sustain"`
	// GPUPowerMaxW held for GPUTempSustain drains the GPU; 0: no limit.
	GPUPowerMaxW int `toml:"gpu_power_max_w"`
	// FatalXIDs drain a GPU at once; empty: every XID does.
	FatalXIDs []int `toml:"fatal_xids"`
	// ECCUncorrectedMax: more uncorrected ECC errors drain the GPU; -1: off.
	ECCUncorrectedMax int `toml:"ecc_uncorrected_max"`
	// Interval between GPU health samples.
	Interval Duration `toml:"interval"`
}

// DefaultNode returns the node configuration used when no file is given.
func DefaultNode() Node {
	return Node{
		Version: Version,
		Node: NodeSection{
			Controller:        "unix:///run/gpud/gpud.sock",
			StateDir:          "/var/lib/gpud/node",
			GPUs:              "auto",
			Features:          []string{},
			HostRoot:          "writable",
			PrivateTmp:        true,
			Mounts:            []string{},
			CDIDir:            "/var/run/cdi",
			ContainerdAddress: "/run/containerd/containerd.sock",
			DefaultImage:      "host",
			KillGrace:         "30s",
			CheckpointRoot:    "/var/lib/gpud/checkpoints",
			CheckpointTimeout: "60s",
			MIG:               "off",
			MIGGPUs:           map[string]string{},
			RDMASysfs:         "/sys",
			UsageInterval:     "30s",
			StepListen:        ":6818",
		},
		Health: Health{GPUTempMaxC: 85, GPUTempSustain: "60s", Interval: "10s",
			// NVIDIA's "reset the GPU" XIDs: memory page retirement and
			// row-remapping failures, fallen off the bus, NVLink, fatal
			// uncontained ECC.
			FatalXIDs: []int{48, 63, 64, 74, 79, 92, 94, 95}},
	}
}

// LoadNode reads node.toml at path over DefaultNode and validates it. An
// empty path means the defaults alone; a path that does not exist is an
// error.
func LoadNode(path string) (Node, error) {
	n := DefaultNode()
	if err := load(path, &n); err != nil {
		return Node{}, err
	}
	if err := n.Validate(); err != nil {
		if path != "" {
			return Node{}, fmt.Errorf("config %s: %w", path, err)
		}
		return Node{}, err
	}
	return n, nil
}

// NodeName returns Name, or the hostname when Name is empty.
func (s NodeSection) NodeName() (string, error) {
	if s.Name != "" {
		return s.Name, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("find node name: %w; set [node] name", err)
	}
	return h, nil
}

// MemMiB returns Mem in MiB, 0 meaning "detect". Valid after Validate.
func (s NodeSection) MemMiB() int64 {
	v, _ := parseMemMiB(s.Mem)
	return v
}

// Validate returns every problem in n, joined, each naming its key.
func (n Node) Validate() error {
	var p problems
	if n.Version != Version {
		p.addf("version: %d is not supported; this gpud reads version %d", n.Version, Version)
	}
	s := n.Node
	if strings.ContainsAny(s.Name, " \t,=:/") {
		p.addf("[node] name: %q may not contain spaces, ',', '=', ':' or '/'", s.Name)
	}
	addrs := controllerList(s.Controller)
	if len(addrs) == 0 {
		addrs = []string{s.Controller}
	}
	for _, a := range addrs {
		switch {
		case strings.HasPrefix(a, "unix://"):
			if !filepath.IsAbs(strings.TrimPrefix(a, "unix://")) {
				p.addf("[node] controller: %q needs an absolute socket path (unix:///run/gpud/gpud.sock)", a)
			}
		case strings.HasPrefix(a, "https://"), strings.HasPrefix(a, "http://"):
			if strings.TrimLeft(strings.SplitN(a, "://", 2)[1], "/") == "" {
				p.addf("[node] controller: %q has no host (use e.g. \"https://ctl:6817\")", a)
			}
		default:
			p.addf("[node] controller: %q is not an address (use \"unix:///path.sock\", \"https://host:port\", or a comma-separated list of a controller group's addresses)", a)
		}
	}
	for _, d := range []struct{ key, v string }{
		{"state_dir", s.StateDir}, {"cdi_dir", s.CDIDir}, {"checkpoint_root", s.CheckpointRoot}, {"rdma_sysfs", s.RDMASysfs},
	} {
		if !filepath.IsAbs(d.v) {
			p.addf("[node] %s: %q must be an absolute path", d.key, d.v)
		}
	}
	if !slices.Contains(GPUBackends, s.GPUs) {
		p.addf("[node] gpus: %q is not allowed (use %s)", s.GPUs, quoteList(GPUBackends))
	}
	if s.CPUs < 0 {
		p.addf("[node] cpus: %d must not be negative (0 = detect)", s.CPUs)
	}
	if _, err := parseMemMiB(s.Mem); err != nil {
		p.addf("[node] mem: %q is not a memory size (%v; use e.g. \"512G\", \"64000M\", or \"\" to detect)", s.Mem, err)
	}
	for _, f := range s.Features {
		if f == "" || strings.ContainsAny(f, " \t,&|[]()*") {
			p.addf("[node] features: %q is not a feature name (letters, digits, '-', '_', '.')", f)
		}
	}
	if !slices.Contains(HostRoots, s.HostRoot) {
		p.addf("[node] host_root: %q is not a host root mode (use %s)", s.HostRoot, quoteList(HostRoots))
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m) || filepath.Clean(m) != m || m == "/" {
			p.addf("[node] mounts: %q must be a clean absolute path other than / (e.g. \"/home\", \"/scratch\")", m)
		}
	}
	if s.ContainerdAddress == "" {
		p.addf("[node] containerd_address: empty; give containerd's socket (e.g. \"/run/containerd/containerd.sock\")")
	}
	if s.DefaultImage == "" {
		p.addf("[node] default_image: empty; use \"host\" or an image reference")
	}
	p.duration("[node] kill_grace", s.KillGrace, true)
	p.duration("[node] checkpoint_timeout", s.CheckpointTimeout, true)
	p.duration("[node] usage_interval", s.UsageInterval, false)
	if s.StepListen != "" {
		if _, port, err := net.SplitHostPort(s.StepListen); err != nil || port == "" {
			p.addf("[node] step_listen: %q is not host:port (use e.g. \":6818\", or \"\" for no steps across hosts)", s.StepListen)
		}
	}
	if s.MetricsListen != "" {
		if _, port, err := net.SplitHostPort(s.MetricsListen); err != nil || port == "" {
			p.addf("[node] metrics_listen: %q is not host:port (use e.g. \":9400\" or \"127.0.0.1:9400\", or \"\" for no metrics)", s.MetricsListen)
		}
	}
	if !slices.Contains(MIGModes, s.MIG) {
		p.addf("[node] mig: %q is not a MIG mode (use %s)", s.MIG, quoteList(MIGModes))
	}
	for k, v := range s.MIGGPUs {
		if i, err := strconv.Atoi(k); err != nil || i < 0 {
			p.addf("[node] mig_gpus: key %q is not a GPU index (use \"0\", \"1\", ...)", k)
		}
		if !slices.Contains(MIGModes, v) {
			p.addf("[node] mig_gpus: GPU %s: %q is not a MIG mode (use %s)", k, v, quoteList(MIGModes))
		}
	}
	if n.Health.GPUTempMaxC < 30 || n.Health.GPUTempMaxC > 120 {
		p.addf("[health] gpu_temp_max_c: %d is outside 30-120", n.Health.GPUTempMaxC)
	}
	p.duration("[health] gpu_temp_sustain", n.Health.GPUTempSustain, true)
	p.duration("[health] interval", n.Health.Interval, true)
	if n.Health.GPUPowerMaxW < 0 {
		p.addf("[health] gpu_power_max_w: %d must not be negative (0 = no limit)", n.Health.GPUPowerMaxW)
	}
	if n.Health.ECCUncorrectedMax < -1 {
		p.addf("[health] ecc_uncorrected_max: %d must be -1 (off) or more", n.Health.ECCUncorrectedMax)
	}
	for _, x := range n.Health.FatalXIDs {
		if x <= 0 {
			p.addf("[health] fatal_xids: %d is not an XID (positive numbers, e.g. 79)", x)
		}
	}
	return p.err()
}

// controllerList splits [node] controller on commas (what api.NewClient
// reads), dropping empty items.
func controllerList(s string) []string {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
