package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/daemon"
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
			if err := followTestClock(c.Context, log); err != nil {
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
			return daemon.RunNode(c.Context, daemon.NodeOptions{
				Name:       name,
				Controller: s.Controller,
				Containerd: s.ContainerdAddress,
				Section:    *s,
				Health:     cfg.Health,
				Images:     cfg.Images,
				DevRoot:    filepath.Join(s.StateDir, "dev"),
				Log:        log,
				Version:    version,
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
