package config

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/health"
)

// GPUBackends are the values of [node] gpus. runtime/gpu/nvml.Backends
// lists the same; config must not import it (see doc.go).
var GPUBackends = []string{"auto", "nvml", "none", "mock:dgx-a100", "mock:dgx-h100", "mock:dgx-h200"}

// Node is node.toml, a node agent's configuration.
type Node struct {
	Version int         `toml:"version"`
	Node    NodeSection `toml:"node"`
	Health  Health      `toml:"health"`
	Images  Images      `toml:"images"`
}

// Images is [images]: pulls from OCI registries and the node's one
// cache of pulled images.
type Images struct {
	// CacheMax bounds the bytes on disk of the images this node pulled,
	// like "200G"; "" is unbounded. The least recently used go first,
	// never one a job runs from.
	CacheMax string `toml:"cache_max"`
	// CAFile is a site CA (PEM) trusted for registries besides the
	// system roots; "" trusts the system roots only.
	CAFile string `toml:"ca_file"`
	// Mirrors lists, per registry host ("docker.io", "nvcr.io"), mirror
	// URLs tried before it, in order.
	Mirrors map[string][]string `toml:"mirrors"`
	// Downloads is how many layers one pull fetches at once.
	Downloads int `toml:"downloads"`
	// Prefetch pulls the images of pending jobs that the scheduler
	// expects to start on this node while they wait.
	Prefetch bool `toml:"prefetch"`
}

// CacheMaxBytes is CacheMax in bytes (0: unbounded). Valid after Validate.
func (i Images) CacheMaxBytes() int64 {
	n, _ := parseMemMiB(i.CacheMax)
	return n << 20
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
	KillGrace Duration `toml:"kill_grace"`
	// OverTimeLimit is how long a job may run past its time limit before
	// it is stopped (Slurm's OverTimeLimit).
	OverTimeLimit  Duration `toml:"over_time_limit"`
	CheckpointRoot string   `toml:"checkpoint_root"`
	// CheckpointTimeout is how long a job has to complete a checkpoint
	// after the signal; a checkpoint-first stop (requeue, checkpoint-mode
	// preemption, drain) then goes ahead without one.
	CheckpointTimeout Duration `toml:"checkpoint_timeout"`
	// CheckpointRetention is how long the sealed checkpoints of a job
	// that ended for good stay on the node after its end ("0": removed
	// as soon as the controller says so).
	CheckpointRetention Duration `toml:"checkpoint_retention"`
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
	// PreparedContainers is how many containers the agent keeps prepared
	// for the next jobs of each shape (user, image, working directory,
	// devices, limits, mounts) that it started: such a job's start is
	// then only its process's start; with it on, the agent also prepares
	// one for each job the controller expects to place on the node next
	// (gpud/node expect.go). 0 (the default) prepares none.
	PreparedContainers int `toml:"prepared_containers"`
	// PreparedMax bounds the prepared containers on the node, all shapes
	// together.
	PreparedMax int `toml:"prepared_max"`
	// PreparedMaxAge is how long a prepared container waits for a job
	// of its shape before it is destroyed.
	PreparedMaxAge Duration `toml:"prepared_max_age"`
	// ShimGroupSize lets up to this many job containers of one user share
	// one containerd runc shim (runtime/containerd shimgroup.go); 0 (the
	// default) gives each container its own.
	ShimGroupSize int `toml:"shim_group_size"`
	// OCIRuntime is the OCI runtime containerd's runc shim runs for
	// every job container: "runc" (the default), "crun", or the absolute
	// path of a runc-compatible binary.
	OCIRuntime string `toml:"oci_runtime"`
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
	// FatalXIDs are XIDs that drain a GPU at once, on top of the triage
	// table (the same as triage entries "xid<N>" = "fatal").
	FatalXIDs []int `toml:"fatal_xids"`
	// Triage overrides the health model's triage table: code → "class"
	// or "class:action" (gpud/health.ParseTriage).
	Triage map[string]string `toml:"triage"`
	// ECCCorrectedMax corrected ECC errors within RateWindow are logged as
	// degraded; 0: off. NVLinkErrorsMax likewise for NVLink errors.
	ECCCorrectedMax int      `toml:"ecc_corrected_max"`
	NVLinkErrorsMax int      `toml:"nvlink_errors_max"`
	RateWindow      Duration `toml:"rate_window"`
	// ProbeAfter: a drained GPU whose readings stay clean this long is
	// probed, and readmitted if the probe passes.
	ProbeAfter Duration `toml:"probe_after"`
	// DCGMDiagLevel is the dcgmi diag run level of a readmission probe
	// where DCGM is installed (1-3); 0: never run dcgmi.
	DCGMDiagLevel int `toml:"dcgm_diag_level"`
	// ECCUncorrectedMax: more uncorrected ECC errors drain the GPU; -1: off.
	ECCUncorrectedMax int `toml:"ecc_uncorrected_max"`
	// Interval between GPU health samples.
	Interval Duration `toml:"interval"`
	// DiagInterval is how often each idle GPU gets a background
	// diagnostic ("0s": never); DiagLevel the dcgmi diag run level of it
	// where DCGM is installed (1-3; 0: quick checks only).
	DiagInterval Duration `toml:"diag_interval"`
	DiagLevel    int      `toml:"diag_level"`
	// The trend rule (gpud/health Limits): corrected ECC errors counted
	// per TrendWindow, rising by half or more over TrendWindows windows
	// to at least ECCTrendMin, or rows remapped in each of them, take
	// the GPU out before it fails; TrendWindows 0: off.
	TrendWindow  Duration `toml:"trend_window"`
	TrendWindows int      `toml:"trend_windows"`
	ECCTrendMin  int      `toml:"ecc_trend_min"`
}

// DefaultNode returns the node configuration used when no file is given.
func DefaultNode() Node {
	return Node{
		Version: Version,
		Node: NodeSection{
			Controller:          "unix:///run/gpud/gpud.sock",
			StateDir:            "/var/lib/gpud/node",
			GPUs:                "auto",
			Features:            []string{},
			HostRoot:            "writable",
			PrivateTmp:          true,
			Mounts:              []string{},
			CDIDir:              "/var/run/cdi",
			ContainerdAddress:   "/run/containerd/containerd.sock",
			DefaultImage:        "host",
			KillGrace:           "30s",
			OverTimeLimit:       "0s",
			CheckpointRoot:      "/var/lib/gpud/checkpoints",
			CheckpointTimeout:   "60s",
			CheckpointRetention: "7d",
			MIG:                 "off",
			MIGGPUs:             map[string]string{},
			RDMASysfs:           "/sys",
			UsageInterval:       "30s",
			StepListen:          ":6818",
			PreparedMax:         8,
			PreparedMaxAge:      "60s",
			OCIRuntime:          "runc",
		},
		Health: Health{GPUTempMaxC: 85, GPUTempSustain: "60s", Interval: "10s",
			// The XIDs to drain on are the triage table's (gpud/health).
			FatalXIDs: []int{}, Triage: map[string]string{},
			ECCCorrectedMax: 1000, NVLinkErrorsMax: 10000, RateWindow: "1h", ProbeAfter: "60s", DCGMDiagLevel: 1,
			DiagInterval: "0s", DiagLevel: 1, TrendWindow: "6h", TrendWindows: 4, ECCTrendMin: 100},
		Images: Images{Mirrors: map[string][]string{}, Downloads: 8, Prefetch: true},
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
	p.duration("[node] over_time_limit", s.OverTimeLimit, false)
	p.duration("[node] checkpoint_timeout", s.CheckpointTimeout, true)
	p.duration("[node] checkpoint_retention", s.CheckpointRetention, false)
	p.duration("[node] usage_interval", s.UsageInterval, false)
	p.duration("[node] prepared_max_age", s.PreparedMaxAge, true)
	if s.PreparedContainers < 0 {
		p.addf("[node] prepared_containers: %d must not be negative (0 = no prepared containers)", s.PreparedContainers)
	}
	switch {
	case s.OCIRuntime == "runc" || s.OCIRuntime == "crun":
	case s.OCIRuntime == "" || !filepath.IsAbs(s.OCIRuntime) || filepath.Clean(s.OCIRuntime) != s.OCIRuntime:
		p.addf("[node] oci_runtime: %q is not \"runc\", \"crun\" or a clean absolute path to a runc-compatible binary", s.OCIRuntime)
	}
	if s.OCIRuntime != "runc" && s.HostRoot == "read-only" && strings.Contains(filepath.Base(s.OCIRuntime), "crun") {
		p.addf("[node] oci_runtime: %q with host_root = \"read-only\": crun leaves the host root writable; use host_root = \"writable\" or oci_runtime = \"runc\"", s.OCIRuntime)
	}
	if s.ShimGroupSize < 0 {
		p.addf("[node] shim_group_size: %d must not be negative (0 = a shim of its own for each job container)", s.ShimGroupSize)
	}
	if s.PreparedMax < 1 {
		p.addf("[node] prepared_max: %d must be at least 1 (set prepared_containers = 0 to prepare none)", s.PreparedMax)
	}
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
	n.Images.validate(&p)
	for _, x := range n.Health.FatalXIDs {
		if x <= 0 {
			p.addf("[health] fatal_xids: %d is not an XID (positive numbers, e.g. 79)", x)
		}
	}
	if _, err := n.Health.TriageTable(); err != nil {
		p.addf("%v", err)
	}
	if n.Health.ECCCorrectedMax < 0 || n.Health.NVLinkErrorsMax < 0 {
		p.addf("[health] ecc_corrected_max and nvlink_errors_max: %d and %d must not be negative (0 = off)", n.Health.ECCCorrectedMax, n.Health.NVLinkErrorsMax)
	}
	p.duration("[health] rate_window", n.Health.RateWindow, true)
	p.duration("[health] probe_after", n.Health.ProbeAfter, true)
	p.duration("[health] diag_interval", n.Health.DiagInterval, false)
	p.duration("[health] trend_window", n.Health.TrendWindow, true)
	if w := n.Health.TrendWindows; w != 0 && (w < 2 || w > 48) {
		p.addf("[health] trend_windows: %d is outside 2-48 (0: no trend rule)", w)
	}
	if n.Health.ECCTrendMin < 1 {
		p.addf("[health] ecc_trend_min: %d must be at least 1", n.Health.ECCTrendMin)
	}
	if n.Health.DiagLevel < 0 || n.Health.DiagLevel > 3 {
		p.addf("[health] diag_level: %d is outside 0-3 (0: gpud's quick checks only, never dcgmi)", n.Health.DiagLevel)
	}
	if n.Health.DCGMDiagLevel < 0 || n.Health.DCGMDiagLevel > 3 {
		p.addf("[health] dcgm_diag_level: %d is outside 0-3 (0: never run dcgmi)", n.Health.DCGMDiagLevel)
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

// TriageTable is the health model's triage table: the defaults with
// fatal_xids and [health.triage] applied.
func (h Health) TriageTable() (health.Triage, error) {
	over := map[string]string{}
	for _, x := range h.FatalXIDs {
		if x > 0 {
			over[health.XIDCode(x)] = string(health.Fatal)
		}
	}
	maps.Copy(over, h.Triage)
	return health.ParseTriage(health.DefaultTriage(), over)
}

// HealthLimits are the health model's thresholds.
func (h Health) HealthLimits() health.Limits {
	return health.Limits{TempMaxC: float64(h.GPUTempMaxC), PowerMaxW: float64(h.GPUPowerMaxW), Sustain: h.GPUTempSustain.Std(),
		ECCUncorrectedMax: int64(h.ECCUncorrectedMax), ECCCorrectedMax: uint64(max(h.ECCCorrectedMax, 0)),
		NVLinkErrorsMax: uint64(max(h.NVLinkErrorsMax, 0)), Window: h.RateWindow.Std(), ProbeAfter: h.ProbeAfter.Std(),
		TrendWindow: h.TrendWindow.Std(), TrendWindows: h.TrendWindows, ECCTrendMin: uint64(max(h.ECCTrendMin, 1))}
}

func (i Images) validate(p *problems) {
	if _, err := parseMemMiB(i.CacheMax); err != nil {
		p.addf("[images] cache_max: %q is not a size (%v; use e.g. \"200G\", or \"\" for no bound)", i.CacheMax, err)
	}
	if i.CAFile != "" && !filepath.IsAbs(i.CAFile) {
		p.addf("[images] ca_file: %q must be an absolute path (or \"\" for the system roots only)", i.CAFile)
	}
	if i.Downloads < 1 || i.Downloads > 64 {
		p.addf("[images] downloads: %d is outside 1-64", i.Downloads)
	}
	for host, urls := range i.Mirrors {
		if host == "" || strings.ContainsAny(host, "/ #") {
			p.addf("[images] mirrors: key %q is not a registry host (e.g. \"docker.io\", \"nvcr.io\", \"registry.site:5000\")", host)
		}
		for _, u := range urls {
			if !(strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) || len(strings.SplitN(u, "://", 2)[1]) == 0 {
				p.addf("[images] mirrors: %s: %q is not a mirror URL (use \"https://host[:port]\")", host, u)
			}
		}
	}
}
