package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	// https://host:port.
	Controller string `toml:"controller"`
	StateDir   string `toml:"state_dir"`
	// GPUs selects the GPU backend, one of GPUBackends.
	GPUs string `toml:"gpus"`
	// CPUs offered to jobs; 0 detects.
	CPUs int `toml:"cpus"`
	// Mem offered to jobs, like "512G"; empty detects (see MemMiB).
	Mem      string   `toml:"mem"`
	Features []string `toml:"features"`
	// CDIDir is where the node writes the CDI spec of its GPUs.
	CDIDir            string `toml:"cdi_dir"`
	ContainerdAddress string `toml:"containerd_address"`
	// DefaultImage runs jobs that name no image: "host" (the node's root
	// filesystem, read-only) or an image reference.
	DefaultImage string `toml:"default_image"`
	// KillGrace is the wait between SIGTERM and SIGKILL.
	KillGrace      Duration `toml:"kill_grace"`
	CheckpointRoot string   `toml:"checkpoint_root"`
	// MetricsListen is the host:port the agent serves Prometheus /metrics
	// on (per-GPU DCGM-style gauges); empty serves none.
	MetricsListen string `toml:"metrics_listen"`
	// UsageInterval is how often each running job's usage (GPU
	// utilisation, memory, power; cgroup CPU and memory) is sampled for
	// accounting; "0s" samples nothing.
	UsageInterval Duration `toml:"usage_interval"`
}

// Health is [health]: when a GPU counts as unhealthy.
type Health struct {
	// GPUTempMaxC held for GPUTempSustain drains the GPU.
	GPUTempMaxC    int      `toml:"gpu_temp_max_c"`
	GPUTempSustain Duration `toml:"gpu_temp_sustain"`
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
			CDIDir:            "/var/run/cdi",
			ContainerdAddress: "/run/containerd/containerd.sock",
			DefaultImage:      "host",
			KillGrace:         "30s",
			CheckpointRoot:    "/var/lib/gpud/checkpoints",
			UsageInterval:     "30s",
		},
		Health: Health{GPUTempMaxC: 85, GPUTempSustain: "60s"},
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
	switch {
	case strings.HasPrefix(s.Controller, "unix://"):
		if !filepath.IsAbs(strings.TrimPrefix(s.Controller, "unix://")) {
			p.addf("[node] controller: %q needs an absolute socket path (unix:///run/gpud/gpud.sock)", s.Controller)
		}
	case strings.HasPrefix(s.Controller, "https://"), strings.HasPrefix(s.Controller, "http://"):
		if strings.TrimLeft(strings.SplitN(s.Controller, "://", 2)[1], "/") == "" {
			p.addf("[node] controller: %q has no host (use e.g. \"https://ctl:6817\")", s.Controller)
		}
	default:
		p.addf("[node] controller: %q is not an address (use \"unix:///path.sock\" or \"https://host:port\")", s.Controller)
	}
	for _, d := range []struct{ key, v string }{
		{"state_dir", s.StateDir}, {"cdi_dir", s.CDIDir}, {"checkpoint_root", s.CheckpointRoot},
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
	if s.ContainerdAddress == "" {
		p.addf("[node] containerd_address: empty; give containerd's socket (e.g. \"/run/containerd/containerd.sock\")")
	}
	if s.DefaultImage == "" {
		p.addf("[node] default_image: empty; use \"host\" or an image reference")
	}
	p.duration("[node] kill_grace", s.KillGrace, true)
	p.duration("[node] usage_interval", s.UsageInterval, false)
	if s.MetricsListen != "" {
		if _, port, err := net.SplitHostPort(s.MetricsListen); err != nil || port == "" {
			p.addf("[node] metrics_listen: %q is not host:port (use e.g. \":9400\" or \"127.0.0.1:9400\", or \"\" for no metrics)", s.MetricsListen)
		}
	}
	if n.Health.GPUTempMaxC < 30 || n.Health.GPUTempMaxC > 120 {
		p.addf("[health] gpu_temp_max_c: %d is outside 30-120", n.Health.GPUTempMaxC)
	}
	p.duration("[health] gpu_temp_sustain", n.Health.GPUTempSustain, true)
	return p.err()
}
