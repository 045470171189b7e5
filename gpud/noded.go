package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
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
)

var (
	_ runtime.Runtime     = (*containerd.Runtime)(nil)
	_ metrics.JobsSource  = (*node.Agent)(nil)
	_ metrics.StatsSource = (*controller.Controller)(nil)
)

const defaultNodeConfig = "/etc/gpud/node.toml"

func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "node",
		Usage: "run the node agent on a GPU server",
		Flags: append(logFlags(),
			&cli.StringFlag{Name: "config", Usage: "node configuration file (TOML); the default path may be absent", Value: defaultNodeConfig},
			&cli.StringFlag{Name: "name", Usage: "node name in the cluster (default: hostname)"},
			&cli.StringFlag{Name: "controller", Usage: "controller address, unix:///path.sock or https://host:port, or a comma-separated list of an HA group's controllers (the agent follows the leader)", EnvVars: []string{api.EnvController}},
			&cli.StringFlag{Name: "address", Usage: "address other nodes reach this one at: the MASTER_ADDR of jobs whose rank 0 runs here (default: hostname)"},
			&cli.StringFlag{Name: "gpus", Usage: "GPU backend: auto, nvml, none, mock:dgx-a100, mock:dgx-h100, mock:dgx-h200"},
			&cli.IntFlag{Name: "cpus", Usage: "CPUs offered to jobs (0: detect)"},
			&cli.StringFlag{Name: "mem", Usage: "memory offered to jobs, e.g. 512G (default: detect)"},
			&cli.StringFlag{Name: "state-dir", Usage: "directory of outbox.db and job state"},
			&cli.StringFlag{Name: "containerd", Usage: "containerd socket"},
			&cli.StringFlag{Name: "cdi-dir", Usage: "directory for the node's CDI spec"},
			&cli.StringFlag{Name: "features", Usage: "comma-separated node features for --constraint"},
			&cli.StringFlag{Name: "mig", Usage: "MIG mode of the node's MIG-capable GPUs: off, static or dynamic (see [node] mig)"},
			&cli.StringFlag{Name: "rdma-sysfs", Usage: "sysfs root to discover RDMA NICs in (default /sys; a fake tree for mock nodes)"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus /metrics (per-GPU DCGM-style gauges) on this host:port; \"\" serves none"},
		),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			path := configPath(c)
			cfg, err := config.LoadNode(path)
			if err != nil {
				return err
			}
			s := &cfg.Node
			if c.IsSet("name") {
				s.Name = c.String("name")
			}
			if c.IsSet("controller") {
				s.Controller = c.String("controller")
			}
			if c.IsSet("address") {
				s.Address = c.String("address")
			}
			if c.IsSet("gpus") {
				s.GPUs = c.String("gpus")
			}
			if c.IsSet("cpus") {
				s.CPUs = c.Int("cpus")
			}
			if c.IsSet("mem") {
				s.Mem = c.String("mem")
			}
			if c.IsSet("state-dir") {
				s.StateDir = c.String("state-dir")
			}
			if c.IsSet("containerd") {
				s.ContainerdAddress = c.String("containerd")
			}
			if c.IsSet("cdi-dir") {
				s.CDIDir = c.String("cdi-dir")
			}
			if c.IsSet("features") {
				s.Features = splitList(c.String("features"))
			}
			if c.IsSet("mig") {
				s.MIG = c.String("mig")
			}
			if c.IsSet("rdma-sysfs") {
				s.RDMASysfs = c.String("rdma-sysfs")
			}
			if c.IsSet("metrics-listen") {
				s.MetricsListen = c.String("metrics-listen")
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			name, err := s.NodeName()
			if err != nil {
				return err
			}
			return runNode(c.Context, nodeOptions{
				Name:       name,
				Controller: s.Controller,
				Containerd: s.ContainerdAddress,
				Section:    *s,
				Health:     cfg.Health,
				DevRoot:    filepath.Join(s.StateDir, "dev"),
				Log:        log,
			})
		},
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// MockGPUHealthFile, in a node's state dir, overrides the readings of its
// mock GPUs (JSON, e.g. {"3": {"temp_c": 90}}): the fault-injection hook.
const MockGPUHealthFile = "mock-gpu-health.json"

// nodeOptions say how to run one node agent.
type nodeOptions struct {
	Name       string
	Controller string
	Containerd string
	Section    config.NodeSection
	Health     config.Health
	DevRoot    string // for mock GPUs
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

// runNode discovers the node, connects to containerd and runs the agent
// until ctx ends. Job containers keep running when it returns.
func runNode(ctx context.Context, o nodeOptions) error {
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
		// Mock GPUs only: tests write it to make a GPU overheat or fail.
		MockHealthFile: filepath.Join(s.StateDir, MockGPUHealthFile),
	})
	if err != nil {
		return err
	}
	defer devs.Close()
	inv.CRIU = detectCRIU(ctx)
	rt, err := containerd.New(ctx, containerd.Options{Address: o.Containerd, CDISpecDirs: []string{s.CDIDir}})
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", o.Containerd, err)
	}
	defer rt.Close()
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
	agent, err := node.New(node.Config{
		Name:           o.Name,
		StateDir:       s.StateDir,
		Inventory:      inv,
		KillGrace:      s.KillGrace.Std(),
		StopJobsOnStop: o.StopJobs,
		DefaultImage:   s.DefaultImage,
		ToolsDir:       toolsDir(),
		CheckpointRoot: s.CheckpointRoot,
		Addr:           s.Address,
		// The grace of a checkpoint-first stop: requeue, checkpoint-mode
		// preemption, drain, unhealthy GPU.
		CheckpointTimeout: s.CheckpointTimeout.Std(),
		Version:           version,
		UsageInterval:     usageInterval(s.UsageInterval.Std()),
		// The controller's state, should it run on this host (a missing
		// directory is skipped), and containerd's; the controller's socket
		// stays reachable.
		HidePaths: append(append([]string{config.Defaults().Controller.StateDir}, o.HidePaths...), daemonDirs...),
		ShowPaths: unixSocket(o.Controller),
		// The site's shared filesystems, read-write in host jobs.
		Mounts: s.Mounts,
	}, client, rt, append(opts, healthOption(devs, o.Health)...)...)
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

// healthOption watches GPU health when the backend can sample its GPUs.
func healthOption(devs gpu.Devices, h config.Health) []node.Option {
	sampler, ok := devs.(gpu.Sampler)
	if !ok {
		return nil
	}
	return []node.Option{node.WithHealth(sampler, node.HealthLimits{
		Interval:          h.Interval.Std(),
		TempMaxC:          float64(h.GPUTempMaxC),
		PowerMaxW:         float64(h.GPUPowerMaxW),
		Sustain:           h.GPUTempSustain.Std(),
		FatalXIDs:         h.FatalXIDs,
		ECCUncorrectedMax: float64(h.ECCUncorrectedMax),
	})}
}

// usageInterval maps node.toml's usage_interval ("0s": never) onto the
// agent's (negative: never; zero would mean its default).
func usageInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
