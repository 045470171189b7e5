package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/daemon"
	"github.com/gpud/gpud/gpud/process"
)

const defaultControllerConfig = "/etc/gpud/gpud.toml"

func controllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run the central controller (API, queue, scheduler, state)",
		Flags: append(logFlags(),
			&cli.StringFlag{Name: "config", Usage: "controller configuration file (TOML); the default path may be absent", Value: defaultControllerConfig},
			&cli.StringFlag{Name: "state-dir", Usage: "directory of state.db and accounting.db (overrides [controller] state_dir)"},
			&cli.StringFlag{Name: "listen-socket", Usage: "unix socket to serve the API on (overrides [controller] listen_socket)"},
			&cli.StringFlag{Name: "listen-tcp", Usage: "host:port to serve the API on over TCP (overrides [controller] listen_tcp)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (pprof) to this file; at the first SIGHUP (a reload: gpud loadtest --preload brings the partition UP so) it is finished and the rest of the run goes to FILE.hup, finished when the controller exits (gpud loadtest --controller-cpuprofile)"},
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
				stop, err := profileUntilHUP(p, log.Warn)
				if err != nil {
					return err
				}
				defer stop()
			}
			path := configPath(c)
			o := daemon.ControllerOptions{
				ConfigPath: path,
				Override: func(cfg *config.Controller) {
					if c.IsSet("state-dir") {
						cfg.Controller.StateDir = c.String("state-dir")
					}
					if c.IsSet("listen-socket") {
						cfg.Controller.ListenSocket = c.String("listen-socket")
					}
					if c.IsSet("listen-tcp") {
						cfg.Controller.ListenTCP = c.String("listen-tcp")
					}
				},
				Log:     log,
				Version: version,
			}
			d, err := daemon.StartController(c.Context, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "gpud controller listening on unix://%s\n", d.Socket)
			return d.Wait()
		},
	}
}

// profileUntilHUP writes the CPU profile to path until the first SIGHUP
// and from then on to path.hup, so a --preload loadtest's start phase
// (the partition brought UP by a reload) has a profile of its own,
// without the submissions before it. stop finishes whichever is running.
func profileUntilHUP(path string, warn func(string, ...any)) (stop func(), err error) {
	var mu sync.Mutex
	cur, err := process.StartCPUProfile(path)
	if err != nil {
		return nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case <-hup:
		case <-done:
			return
		}
		signal.Stop(hup)
		mu.Lock()
		defer mu.Unlock()
		if cur == nil {
			return
		}
		cur()
		next, err := process.StartCPUProfile(path + ".hup")
		if err != nil {
			warn("no CPU profile after SIGHUP", "err", err)
		}
		cur = next
	}()
	return func() {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			cur()
			cur = nil
		}
	}, nil
}
