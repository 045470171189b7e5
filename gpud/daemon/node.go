package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/metrics"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/gpu"
	"github.com/gpud/gpud/runtime/rdma"
)

var (
	_ runtime.Runtime     = (*containerd.Runtime)(nil)
	_ metrics.JobsSource  = (*node.Agent)(nil)
	_ metrics.StatsSource = (*controller.Controller)(nil)
)

// MockGPUHealthFile, in a node's state dir, overrides the readings of its
// mock GPUs (JSON, e.g. {"3": {"temp_c": 90}}): the fault-injection hook.
const MockGPUHealthFile = "mock-gpu-health.json"

// NodeOptions say how to run one node agent.
type NodeOptions struct {
	Name       string
	Controller string
	Containerd string
	Section    config.NodeSection
	Health     config.Health
	// Images is [images]: registry pulls and the node's image cache.
	Images  config.Images
	DevRoot string // for mock GPUs
	// StopJobs ends the node's running jobs when it stops cleanly.
	StopJobs bool
	Log      *slog.Logger
	// HidePaths are directories of daemon state jobs must not see, besides
	// the node's own state and checkpoint roots (node.Config.HidePaths).
	HidePaths []string
	// Peers joins the agent to the other in-process agents for job steps
	// (gpud standalone); nil: steps stay on this node.
	Peers *node.Peers
	// StepNet, when set, is the step listener and identity to use instead
	// of the joined certificate's ([node] step_listen; gpud standalone).
	StepNet *node.StepNet
	// Version is gpud's, registered with the node's inventory.
	Version string
}

// toolsDir is the directory of gpud's own binary when srun is there too
// (make build's bin/, an install's bin/): mounted into jobs for srun.
func toolsDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Dir(exe)
	if _, err := os.Stat(filepath.Join(dir, "srun")); err != nil {
		return ""
	}
	return dir
}

// RunNode discovers the node, connects to containerd and runs the agent
// until ctx ends. Job containers keep running when it returns.
func RunNode(ctx context.Context, o NodeOptions) error {
	s := o.Section
	log := o.Log.With("node", o.Name)
	inv, devs, mig, err := buildInventory(ctx, inventoryOptions{
		Name:      o.Name,
		Backend:   s.GPUs,
		CPUs:      s.CPUs,
		MemMiB:    s.MemMiB(),
		Features:  s.Features,
		CDIDir:    s.CDIDir,
		DevRoot:   o.DevRoot,
		MIGMode:   s.MIGModeOf,
		RDMASysfs: s.RDMASysfs,
		Version:   o.Version,
		// Mock GPUs only: tests write it to make a GPU overheat or fail.
		MockHealthFile: filepath.Join(s.StateDir, MockGPUHealthFile),
	})
	if err != nil {
		return err
	}
	defer devs.Close()
	inv.CRIU = detectCRIU(ctx)
	rt, err := containerd.New(ctx, containerd.Options{Address: o.Containerd, CDISpecDirs: []string{s.CDIDir},
		Images: containerd.ImageOptions{CacheBytes: o.Images.CacheMaxBytes(), Mirrors: o.Images.Mirrors, CAFile: o.Images.CAFile,
			Downloads: o.Images.Downloads}, ShimGroupSize: s.ShimGroupSize, Node: o.Name,
		OCIRuntime: s.OCIRuntime})
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", o.Containerd, err)
	}
	defer rt.Close()
	if bin, why := rt.OCIRuntime(); bin != "" {
		log.Info("OCI runtime", "binary", bin, "read_only_bind", why == "", "why_not", why)
	}
	// containerd's root and state and runc's: every job's spec is there.
	daemonDirs, err := rt.DaemonDirs(ctx)
	if err != nil {
		return fmt.Errorf("find the state directories of containerd at %s, to hide them from jobs: %w", o.Containerd, err)
	}
	client, err := nodeClient(ctx, o.Name, o.Controller, s, log)
	if err != nil {
		return err
	}
	// Backends without sampling (none) still serve job counts and sample
	// the jobs' cgroups.
	sampler, _ := devs.(gpu.Sampler)
	opts := []node.Option{node.WithLogger(o.Log), node.WithGPUSampler(sampler)} // the agent adds node= itself
	if mig != nil {
		opts = append(opts, node.WithMIG(*mig))
	}
	if o.Peers != nil {
		opts = append(opts, node.WithPeers(o.Peers))
	}
	sn := o.StepNet
	if sn == nil {
		if sn, err = stepNet(s, log); err != nil {
			return err
		}
	}
	if sn != nil {
		defer sn.Listener.Close() // the agent closes it too; this covers a failed start
		opts = append(opts, node.WithStepNet(*sn))
		inv.StepPort = stepPort(sn)
	}
	hopts, err := healthOption(devs, o.Health, s.RDMASysfs)
	if err != nil {
		return err
	}
	agent, err := node.New(node.Config{
		Name:           o.Name,
		StateDir:       s.StateDir,
		Inventory:      inv,
		KillGrace:      s.KillGrace.Std(),
		OverTimeLimit:  s.OverTimeLimit.Std(),
		StopJobsOnStop: o.StopJobs,
		DefaultImage:   s.DefaultImage,
		PrefetchImages: o.Images.Prefetch,
		ToolsDir:       toolsDir(),
		CheckpointRoot: s.CheckpointRoot,
		Addr:           s.Address,
		// The grace of a checkpoint-first stop: requeue, checkpoint-mode
		// preemption, drain, unhealthy GPU.
		CheckpointTimeout: s.CheckpointTimeout.Std(),
		// "0" removes an ended job's checkpoints at once: negative to
		// the agent, whose zero is its default.
		CheckpointRetention: retention(s.CheckpointRetention.Std()),
		Version:             o.Version,
		UsageInterval:       usageInterval(s.UsageInterval.Std()),
		// The controller's state, should it run on this host (a missing
		// directory is skipped), and containerd's; the controller's socket
		// stays reachable.
		HidePaths: append(append([]string{config.Defaults().Controller.StateDir}, o.HidePaths...), daemonDirs...),
		ShowPaths: unixSocket(o.Controller),
		// The site's shared filesystems, read-write in host jobs.
		Mounts:           s.Mounts,
		HostRootReadOnly: s.HostRoot == "read-only",
		SharedTmp:        !s.PrivateTmp,
		// Containers made ahead of the next jobs of a shape (prepared.go).
		PreparedContainers: s.PreparedContainers,
		PreparedMax:        s.PreparedMax,
		PreparedMaxAge:     s.PreparedMaxAge.Std(),
	}, client, rt, append(opts, hopts...)...)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if s.MetricsListen != "" {
		ln, err := net.Listen("tcp", s.MetricsListen)
		if err != nil {
			return fmt.Errorf("listen for metrics on %s: %w; choose another [node] metrics_listen or --metrics-listen", s.MetricsListen, err)
		}
		// Hostname is the node's cluster name (the hostname by default),
		// so GPU series join gpud's node names.
		var mopts []metrics.NodeOption
		if m, ok := devs.(gpu.MIG); ok {
			mopts = append(mopts, metrics.WithMIG(m))
		}
		h := metrics.NewNode(o.Name, inv.GPUs, sampler, agent, mopts...).Handler()
		g.Go(func() error { return metrics.Serve(gctx, ln, h) })
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	log.Info("node agent started", "gpus", len(inv.GPUs), "cpus", inv.CPUs, "mem_mib", inv.MemMiB, "controller", o.Controller)
	g.Go(func() error {
		err := agent.Run(gctx)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	return g.Wait()
}

// unixSocket returns the socket paths of the unix:// addresses in a
// controller address list.
func unixSocket(addr string) []string {
	var out []string
	for _, a := range api.SplitControllers(addr) {
		if p, ok := strings.CutPrefix(a, "unix://"); ok && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// nodeClient connects the agent to the controller. Over https with a
// join_token_file the agent authenticates with its node certificate
// (state_dir/tls/node.pem), joining first if it has none; otherwise it
// uses the unix socket's peer credentials or a node token (GPUD_TOKEN).
// addr may list a controller group's members: the client follows the
// leader, and joins through it.
func nodeClient(ctx context.Context, name, addr string, s config.NodeSection, log *slog.Logger) (*api.Client, error) {
	if !strings.Contains(addr, "https://") || s.JoinTokenFile == "" {
		return api.NewClientWith(addr, api.ClientOptions{CAFile: s.CAFile})
	}
	certPath, keyPath := nodeCertPaths(s)
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		if err := joinCluster(ctx, name, addr, s, keyPath, certPath); err != nil {
			return nil, err
		}
		log.Info("joined the cluster: node certificate stored", "node", name, "cert", certPath)
	}
	return api.NewClientWith(addr, api.ClientOptions{CAFile: s.CAFile, CertFile: certPath, KeyFile: keyPath})
}

// joinCluster gets a node certificate for name with the join token.
func joinCluster(ctx context.Context, name, addr string, s config.NodeSection, keyPath, certPath string) error {
	tok, err := api.ReadTokenFile(s.JoinTokenFile)
	if err != nil {
		return fmt.Errorf("join the cluster: %w", err)
	}
	keyPEM, csrPEM, err := auth.NodeKey(name)
	if err != nil {
		return err
	}
	c, err := api.NewClientWith(addr, api.ClientOptions{CAFile: s.CAFile})
	if err != nil {
		return err
	}
	res, err := c.Join(ctx, api.JoinRequest{Node: name, JoinToken: tok, CSR: string(csrPEM)})
	if err != nil {
		return fmt.Errorf("join the cluster at %s as node %s: %w", addr, name, err)
	}
	return auth.WriteNodeCert(keyPath, certPath, keyPEM, []byte(res.Cert))
}

// healthOption watches GPU health when the backend can sample its GPUs,
// and the RDMA NICs under rdmaSysfs with it ("": none). A readmission
// probe runs dcgmi diag where DCGM is installed.
func healthOption(devs gpu.Devices, h config.Health, rdmaSysfs string) ([]node.Option, error) {
	sampler, ok := devs.(gpu.Sampler)
	if !ok {
		return nil, nil
	}
	triage, err := h.TriageTable()
	if err != nil {
		return nil, err
	}
	var prober node.GPUProber
	if p := node.NewDCGMProber(h.DCGMDiagLevel); p != nil {
		prober = p
	}
	var diag node.GPUProber
	if p := node.NewDCGMDiag(h.DiagLevel); p != nil {
		diag = p
	}
	return []node.Option{node.WithHealth(sampler, node.HealthConfig{
		Interval:     h.Interval.Std(),
		Triage:       triage,
		Limits:       h.HealthLimits(),
		Prober:       prober,
		DiagInterval: h.DiagInterval.Std(),
		Diag:         diag,
		NICs:         nicReader(rdmaSysfs),
	})}, nil
}

// nicReader reads the NICs' state from sysfs each sample (nil without
// RDMA): "" for a usable NIC, else its ports' states, or the port whose
// link went down and came back since the previous reading (its
// link_downed counter rose: a flap between samples, which breaks the
// connections of the jobs on it). Such a NIC reads usable again at the
// next reading, so it comes back after probe_after.
func nicReader(sysfs string) func(context.Context) (map[string]string, error) {
	if sysfs == "" {
		return nil
	}
	downed := map[string]uint64{} // "mlx5_0/1" -> the last link_downed read
	return func(ctx context.Context) (map[string]string, error) {
		nics, err := rdma.Discover(ctx, sysfs)
		if err != nil {
			return nil, err
		}
		out := make(map[string]string, len(nics))
		for _, n := range nics {
			var flaps []string
			for _, p := range n.Ports {
				if !p.HasLinkDowned {
					continue
				}
				key := n.Name + "/" + strconv.Itoa(p.Num)
				if last, ok := downed[key]; ok && p.LinkDowned > last {
					flaps = append(flaps, fmt.Sprintf("port %d link went down %d times since the last reading (link_downed %d)", p.Num, p.LinkDowned-last, p.LinkDowned))
				}
				downed[key] = p.LinkDowned
			}
			if n.Active() {
				out[n.Name] = strings.Join(flaps, ", ")
				continue
			}
			var ports []string
			for _, p := range n.Ports {
				ports = append(ports, fmt.Sprintf("port %d %s", p.Num, p.State))
			}
			if n.Uverbs == "" {
				ports = append(ports, "no verbs device")
			}
			out[n.Name] = cmp.Or(strings.Join(ports, ", "), "no ports")
		}
		return out, nil
	}
}

// usageInterval maps node.toml's usage_interval ("0s": never) onto the
// agent's (negative: never; zero would mean its default).
func usageInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// retention maps node.toml checkpoint_retention onto node.Config's
// (where 0 is the default): "0" removes at once.
func retention(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
