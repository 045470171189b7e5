package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/statefile"
	"github.com/gpud/gpud/runtime/containerd"
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
		),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			n := c.Int("nodes")
			if n < 0 || n > 64 {
				return usagef("--nodes %d: use 0 to 64", n)
			}
			dir, err := filepath.Abs(c.String("state-dir"))
			if err != nil {
				return err
			}
			// The socket's directory: 0711, so every user reaches
			// gpud.sock but none lists or reads the state beside it
			// (0600 files; see secureStateFiles).
			fixes, err := statefile.Dir(dir, 0o711)
			if err != nil {
				return fmt.Errorf("create state dir: %w", err)
			}
			statefile.Log(log, fixes)
			metricsHost, metricsPort := "", 0
			if ml := c.String("metrics-listen"); ml != "" {
				h, p, err := net.SplitHostPort(ml)
				port, perr := strconv.Atoi(p)
				if err != nil || perr != nil || port <= 0 || port+n-1 > 65535 {
					return usagef("--metrics-listen %q: give host:port with a port from 1 to %d (node N listens on port+N-1)", ml, 65536-max(n, 1))
				}
				metricsHost, metricsPort = h, port
			}
			nodeDefaults := config.DefaultNode()
			file := c.String("node-config")
			if file != "" {
				if nodeDefaults, err = config.LoadNode(file); err != nil {
					return err
				}
			}
			// With a file, a flag wins only when given.
			flag := func(name string) bool { return file == "" || c.IsSet(name) }
			if flag("gpus") {
				nodeDefaults.Node.GPUs = c.String("gpus")
			}
			if flag("cpus") {
				nodeDefaults.Node.CPUs = c.Int("cpus")
			}
			if flag("mem") {
				nodeDefaults.Node.Mem = c.String("mem")
			}
			if flag("kill-grace") {
				nodeDefaults.Node.KillGrace = config.Duration(c.Duration("kill-grace").String())
			}
			if flag("mig") {
				nodeDefaults.Node.MIG = c.String("mig")
			}
			if flag("rdma-sysfs") {
				nodeDefaults.Node.RDMASysfs = c.String("rdma-sysfs")
			}
			if flag("usage-interval") {
				nodeDefaults.Node.UsageInterval = config.Duration(c.Duration("usage-interval").String())
			}
			nodeDefaults.Node.StateDir = filepath.Join(dir, "nodes")
			nodeDefaults.Node.CDIDir = filepath.Join(dir, "cdi")
			nodeDefaults.Node.CheckpointRoot = filepath.Join(dir, "checkpoints")
			if err := nodeDefaults.Validate(); err != nil {
				return err
			}

			ctx, cancel := context.WithCancel(c.Context)
			defer cancel()

			ctrdAddr := c.String("containerd")
			var daemon *containerd.Daemon
			if ctrdAddr == "" {
				logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
				if err != nil {
					return err
				}
				defer logf.Close()
				if err := logf.Chmod(0o600); err != nil { // an older gpud made it 0644
					return fmt.Errorf("make %s private: %w", logf.Name(), err)
				}
				daemon, err = containerd.StartDaemon(ctx, containerd.DaemonOptions{Dir: filepath.Join(dir, "containerd"), Log: logf})
				if err != nil {
					return fmt.Errorf("start private containerd: %w", err)
				}
				ctrdAddr = daemon.Address()
				log.Info("private containerd ready", "address", ctrdAddr, "reused", daemon.Reused, "log", filepath.Join(dir, "containerd.log"))
			}

			// The nodes' identities for steps (srun from outside a job,
			// and peers with --steps-over-network): node certificates from
			// a CA under --state-dir, which the controller hands to srun.
			ca, err := standaloneCA(dir)
			if err != nil {
				stopDaemon(daemon)
				return err
			}
			socket := filepath.Join(dir, "gpud.sock")
			ctrl, err := startController(ctx, controllerOptions{
				ConfigPath: c.String("config"),
				Override: func(cfg *config.Controller) {
					cfg.Controller.StateDir = dir
					cfg.Controller.ListenSocket = socket
					cfg.Accounting.Path = filepath.Join(dir, "accounting.db")
				},
				Log: log.With("component", "controller"),
			})
			if err != nil {
				stopDaemon(daemon)
				return err
			}
			fmt.Fprintf(c.App.Writer, "unix://%s\n", socket)

			g, gctx := errgroup.WithContext(ctx)
			g.Go(ctrl.Wait)
			// A failing node agent stops the whole tree, controller included.
			g.Go(func() error { <-gctx.Done(); cancel(); return nil })
			peers := node.NewPeers()
			if c.Bool("steps-over-network") {
				peers = nil
			}
			for i := 1; i <= n; i++ {
				name := fmt.Sprintf("node%d", i)
				sec := nodeDefaults.Node
				sec.Name = name
				sec.StateDir = filepath.Join(dir, "nodes", name)
				if metricsPort > 0 {
					sec.MetricsListen = net.JoinHostPort(metricsHost, strconv.Itoa(metricsPort+i-1))
				}
				sn, err := standaloneStepNet(ca, name)
				if err != nil {
					cancel()
					_ = g.Wait()
					stopDaemon(daemon)
					return err
				}
				g.Go(func() error {
					return runNode(gctx, nodeOptions{
						Name:       name,
						Controller: "unix://" + socket,
						Containerd: ctrdAddr,
						Section:    sec,
						Health:     nodeDefaults.Health,
						DevRoot:    filepath.Join(sec.StateDir, "dev"),
						StopJobs:   c.Bool("stop-jobs"),
						Log:        log.With("component", "node"),
						// Everything under --state-dir is daemon state.
						HidePaths: []string{dir},
						Peers:     peers,
						StepNet:   sn,
					})
				})
			}
			err = g.Wait()
			stopDaemon(daemon)
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			log.Info("standalone stopped; job state stays in " + dir)
			return nil
		},
	}
}

func stopDaemon(d *containerd.Daemon) {
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = d.Stop(ctx)
}
