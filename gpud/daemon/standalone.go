package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/statefile"
	"github.com/gpud/gpud/runtime/containerd"
)

// StandaloneOptions say how to run `gpud standalone`: a controller, N
// node agents and (unless Containerd is given) a private containerd in
// one process tree, with every state under Dir.
type StandaloneOptions struct {
	Dir   string // the state directory; the API listens on unix://Dir/gpud.sock
	Nodes int
	// Node is what every node starts from ([node] and [health]); its
	// name, state, CDI and checkpoint paths are set under Dir.
	Node config.Node
	// ConfigPath is the controller's configuration file ("": built-in
	// defaults); its state paths and socket are set under Dir.
	ConfigPath string
	// Containerd is the socket of a containerd to use; "" starts a
	// private one under Dir.
	Containerd string
	// MetricsHost and MetricsPort: node N serves /metrics on
	// MetricsPort+N-1 (port 0: none).
	MetricsHost string
	MetricsPort int
	// StepsOverNetwork has the nodes start each other's shares of job
	// steps over their step listeners, as separate hosts do, instead of
	// in process.
	StepsOverNetwork bool
	// StopJobs ends the running jobs on a clean stop.
	StopJobs bool
	Log      *slog.Logger
	// Out is told the API's address (unix://...) once it listens.
	Out     io.Writer
	Version string
}

// RunStandalone runs the tree until ctx ends or a part fails (a failing
// node agent stops the whole tree, controller included). Jobs keep their
// state in Dir for the next start.
func RunStandalone(ctx context.Context, o StandaloneOptions) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	if err := prepareStandaloneDir(dir, o.Log); err != nil {
		return err
	}
	nodeCfg, err := standaloneNodeConfig(o.Node, dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctrdAddr, stopContainerd, err := standaloneContainerd(ctx, o)
	if err != nil {
		return err
	}
	defer stopContainerd()
	// The nodes' identities for steps (srun from outside a job, and
	// peers with StepsOverNetwork): node certificates from a CA under
	// Dir, which the controller hands to srun.
	ca, err := standaloneCA(dir)
	if err != nil {
		return err
	}
	socket := filepath.Join(dir, "gpud.sock")
	ctrl, err := StartController(ctx, ControllerOptions{
		ConfigPath: o.ConfigPath,
		Override: func(cfg *config.Controller) {
			cfg.Controller.StateDir = dir
			cfg.Controller.ListenSocket = socket
			cfg.Accounting.Path = filepath.Join(dir, "accounting.db")
		},
		Log:     o.Log.With("component", "controller"),
		Version: o.Version,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "unix://%s\n", socket)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(ctrl.Wait)
	// A failing node agent stops the whole tree, controller included.
	g.Go(func() error { <-gctx.Done(); cancel(); return nil })
	if err := startStandaloneNodes(gctx, g, o, nodeCfg, ca, "unix://"+socket, ctrdAddr); err != nil {
		cancel()
		_ = g.Wait()
		return err
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	o.Log.Info("standalone stopped; job state stays in " + dir)
	return nil
}

// prepareStandaloneDir makes the state directory 0711, so every user
// reaches gpud.sock but none lists or reads the state beside it (0600
// files; see secureStateFiles).
func prepareStandaloneDir(dir string, log *slog.Logger) error {
	fixes, err := statefile.Dir(dir, 0o711)
	if err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	statefile.Log(log, fixes)
	return nil
}

// standaloneNodeConfig puts the nodes' state, CDI specs and checkpoints
// under dir and checks the result.
func standaloneNodeConfig(c config.Node, dir string) (config.Node, error) {
	c.Node.StateDir = filepath.Join(dir, "nodes")
	c.Node.CDIDir = filepath.Join(dir, "cdi")
	c.Node.CheckpointRoot = filepath.Join(dir, "checkpoints")
	return c, c.Validate()
}

// standaloneContainerd is the containerd the nodes use: o.Containerd, or
// a private one under o.Dir logging to o.Dir/containerd.log, which stop
// stops.
func standaloneContainerd(ctx context.Context, o StandaloneOptions) (addr string, stop func(), err error) {
	if o.Containerd != "" {
		return o.Containerd, func() {}, nil
	}
	logPath := filepath.Join(o.Dir, "containerd.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := logf.Chmod(0o600); err != nil { // an older gpud made it 0644
		logf.Close()
		return "", nil, fmt.Errorf("make %s private: %w", logf.Name(), err)
	}
	daemon, err := containerd.StartDaemon(ctx, containerd.DaemonOptions{Dir: filepath.Join(o.Dir, "containerd"), Log: logf})
	if err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start private containerd: %w", err)
	}
	o.Log.Info("private containerd ready", "address", daemon.Address(), "reused", daemon.Reused, "log", logPath)
	// The daemon's log is copied into logf until it stops.
	return daemon.Address(), func() { stopDaemon(daemon); logf.Close() }, nil
}

// startStandaloneNodes starts node1..nodeN in g, each with its own state
// dir under nodeCfg's and a step listener with a certificate ca signs.
func startStandaloneNodes(ctx context.Context, g *errgroup.Group, o StandaloneOptions, nodeCfg config.Node, ca *auth.CA, controllerAddr, ctrdAddr string) error {
	peers := node.NewPeers()
	if o.StepsOverNetwork {
		peers = nil
	}
	for i := 1; i <= o.Nodes; i++ {
		name := fmt.Sprintf("node%d", i)
		sec := nodeCfg.Node
		sec.Name = name
		sec.StateDir = filepath.Join(nodeCfg.Node.StateDir, name)
		if o.MetricsPort > 0 {
			sec.MetricsListen = net.JoinHostPort(o.MetricsHost, strconv.Itoa(o.MetricsPort+i-1))
		}
		sn, err := standaloneStepNet(ca, name)
		if err != nil {
			return err
		}
		g.Go(func() error {
			return RunNode(ctx, NodeOptions{
				Name:       name,
				Controller: controllerAddr,
				Containerd: ctrdAddr,
				Section:    sec,
				Health:     nodeCfg.Health,
				Images:     nodeCfg.Images,
				DevRoot:    filepath.Join(sec.StateDir, "dev"),
				StopJobs:   o.StopJobs,
				Log:        o.Log.With("component", "node"),
				// Everything under the state dir is daemon state.
				HidePaths: []string{o.Dir},
				Peers:     peers,
				StepNet:   sn,
				Version:   o.Version,
			})
		})
	}
	return nil
}

func stopDaemon(d *containerd.Daemon) {
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = d.Stop(ctx)
}
