package main

import (
	"net"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/daemon"
	"github.com/gpud/gpud/gpud/process"
)

func standaloneCommand() *cli.Command {
	return &cli.Command{
		Name:  "standalone",
		Usage: "run a controller, N node agents and (unless --containerd is given) a private containerd in one process tree",
		Flags: append(logFlags(),
			&cli.StringFlag{Name: "state-dir", Usage: "directory for all state; the API listens on unix://DIR/gpud.sock", Required: true},
			&cli.IntFlag{Name: "nodes", Usage: "number of node agents", Value: 2},
			&cli.StringFlag{Name: "gpus", Usage: "GPU backend of every node: none, nvml, auto, mock:dgx-a100, mock:dgx-h100, mock:dgx-h200", Value: "mock:dgx-h100"},
			&cli.StringFlag{Name: "containerd", Usage: "use this containerd socket instead of starting a private containerd"},
			&cli.StringFlag{Name: "config", Usage: "controller configuration file (TOML); default: built-in defaults"},
			&cli.IntFlag{Name: "cpus", Usage: "CPUs each node offers (0: the host's)"},
			&cli.StringFlag{Name: "mem", Usage: "memory each node offers, e.g. 64G (default: the host's)"},
			&cli.StringFlag{Name: "mig", Usage: "MIG mode of every node's GPUs: off, static or dynamic", Value: "off"},
			&cli.StringFlag{Name: "rdma-sysfs", Usage: "sysfs root every node discovers RDMA NICs in (a fake tree for mock nodes)", Value: "/sys"},
			&cli.DurationFlag{Name: "kill-grace", Usage: "time between SIGTERM and SIGKILL when a job is stopped", Value: 30 * time.Second},
			&cli.StringFlag{Name: "node-config", Usage: "node configuration file (TOML) every node starts from, e.g. for [health]; flags given win, and state, CDI and checkpoint paths are under --state-dir"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "host:port of node1's Prometheus /metrics; node N serves on port+N-1 (\"\": none)"},
			&cli.DurationFlag{Name: "usage-interval", Usage: "how often the nodes sample each running job's usage for accounting (0 for never)", Value: 30 * time.Second},
			&cli.BoolFlag{Name: "steps-over-network", Usage: "the nodes start each other's shares of job steps over their step listeners (TLS with node certificates), as separate hosts do, instead of in process"},
			&cli.BoolFlag{Name: "stop-jobs", Usage: "on a clean stop (SIGTERM, SIGINT) end the running jobs too (SIGTERM, --kill-grace, SIGKILL; they end NODE_FAIL and requeue if allowed) instead of leaving them running for the next start"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (pprof) of this process (the controller and the node agents; not containerd, its shims or runc) to this file, finished when it exits"},
		),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			if err := followTestClock(c.Context, log); err != nil {
				return err
			}
			if p := c.String("cpuprofile"); p != "" {
				stop, err := process.StartCPUProfile(p)
				if err != nil {
					return err
				}
				defer stop()
			}
			n := c.Int("nodes")
			if n < 0 || n > 64 {
				return usagef("--nodes %d: use 0 to 64", n)
			}
			metricsHost, metricsPort := "", 0
			if ml := c.String("metrics-listen"); ml != "" {
				h, p, err := net.SplitHostPort(ml)
				port, perr := strconv.Atoi(p)
				if err != nil || perr != nil || port <= 0 || port+n-1 > 65535 {
					return usagef("--metrics-listen %q: give host:port with a port from 1 to %d (node N listens on port+N-1)", ml, 65536-max(n, 1))
				}
				metricsHost, metricsPort = h, port
			}
			nodeCfg, err := standaloneNodeFlags(c)
			if err != nil {
				return err
			}
			return daemon.RunStandalone(c.Context, daemon.StandaloneOptions{
				Dir:              c.String("state-dir"),
				Nodes:            n,
				Node:             nodeCfg,
				ConfigPath:       c.String("config"),
				Containerd:       c.String("containerd"),
				MetricsHost:      metricsHost,
				MetricsPort:      metricsPort,
				StepsOverNetwork: c.Bool("steps-over-network"),
				StopJobs:         c.Bool("stop-jobs"),
				Log:              log,
				Out:              c.App.Writer,
				Version:          version,
			})
		},
	}
}

// standaloneNodeFlags is what every node starts from: --node-config (or
// the defaults) with the node flags over it; with a file, a flag wins
// only when given.
func standaloneNodeFlags(c *cli.Context) (config.Node, error) {
	cfg := config.DefaultNode()
	file := c.String("node-config")
	if file != "" {
		var err error
		if cfg, err = config.LoadNode(file); err != nil {
			return cfg, err
		}
	}
	flag := func(name string) bool { return file == "" || c.IsSet(name) }
	s := &cfg.Node
	if flag("gpus") {
		s.GPUs = c.String("gpus")
	}
	if flag("cpus") {
		s.CPUs = c.Int("cpus")
	}
	if flag("mem") {
		s.Mem = c.String("mem")
	}
	if flag("kill-grace") {
		s.KillGrace = config.Duration(c.Duration("kill-grace").String())
	}
	if flag("mig") {
		s.MIG = c.String("mig")
	}
	if flag("rdma-sysfs") {
		s.RDMASysfs = c.String("rdma-sysfs")
	}
	if flag("usage-interval") {
		s.UsageInterval = config.Duration(c.Duration("usage-interval").String())
	}
	return cfg, nil
}
