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
			&cli.StringFlag{Name: "controller", Usage: "controller address, unix:///path.sock or https://host:port", EnvVars: []string{api.EnvController}},
			&cli.StringFlag{Name: "gpus", Usage: "GPU backend: auto, nvml, none, mock:dgx-a100, mock:dgx-h100, mock:dgx-h200"},
			&cli.IntFlag{Name: "cpus", Usage: "CPUs offered to jobs (0: detect)"},
			&cli.StringFlag{Name: "mem", Usage: "memory offered to jobs, e.g. 512G (default: detect)"},
			&cli.StringFlag{Name: "state-dir", Usage: "directory of outbox.db and job state"},
			&cli.StringFlag{Name: "containerd", Usage: "containerd socket"},
			&cli.StringFlag{Name: "cdi-dir", Usage: "directory for the node's CDI spec"},
			&cli.StringFlag{Name: "features", Usage: "comma-separated node features for --constraint"},
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

// nodeOptions say how to run one node agent.
type nodeOptions struct {
	Name       string
	Controller string
	Containerd string
	Section    config.NodeSection
	DevRoot    string // for mock GPUs
	Log        *slog.Logger
}

// runNode discovers the node, connects to containerd and runs the agent
// until ctx ends. Job containers keep running when it returns.
func runNode(ctx context.Context, o nodeOptions) error {
	s := o.Section
	log := o.Log.With("node", o.Name)
	inv, devs, err := buildInventory(ctx, inventoryOptions{
		Name:     o.Name,
		Backend:  s.GPUs,
		CPUs:     s.CPUs,
		MemMiB:   s.MemMiB(),
		Features: s.Features,
		CDIDir:   s.CDIDir,
		DevRoot:  o.DevRoot,
	})
	if err != nil {
		return err
	}
	defer devs.Close()
	rt, err := containerd.New(ctx, containerd.Options{Address: o.Containerd, CDISpecDirs: []string{s.CDIDir}})
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", o.Containerd, err)
	}
	defer rt.Close()
	client, err := api.NewClient(o.Controller)
	if err != nil {
		return err
	}
	// Backends without sampling (none) still serve job counts and sample
	// the jobs' cgroups.
	sampler, _ := devs.(gpu.Sampler)
	agent, err := node.New(node.Config{
		Name:           o.Name,
		StateDir:       s.StateDir,
		Inventory:      inv,
		KillGrace:      s.KillGrace.Std(),
		DefaultImage:   s.DefaultImage,
		CheckpointRoot: s.CheckpointRoot,
		Version:        version,
		UsageInterval:  usageInterval(s.UsageInterval.Std()),
	}, client, rt, node.WithLogger(o.Log), node.WithGPUSampler(sampler)) // the agent adds node= itself
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
		h := metrics.NewNode(o.Name, inv.GPUs, sampler, agent).Handler()
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

// usageInterval maps node.toml's usage_interval ("0s": never) onto the
// agent's (negative: never; zero would mean its default).
func usageInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
