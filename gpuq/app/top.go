package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpud/gpud/cli/termsafe"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func topCommand() *cli.Command {
	return &cli.Command{
		Name:  "top",
		Usage: "live view of nodes, GPU utilisation and the queue",
		Description: "Redraws every --interval: a summary line, each node with its state, GPUs allocated of total " +
			"per model and a bar of its GPUs' utilisation (the mean over all its GPUs, idle ones counting 0, from the " +
			"nodes' newest usage samples), then the running and pending jobs with each running job's GPU utilisation. " +
			"Press q or Ctrl-C to quit. --once prints one frame without clearing the screen (for scripts).",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Aliases: []string{"i"}, Value: 2 * time.Second, Usage: "time between frames"},
			&cli.BoolFlag{Name: "once", Usage: "print one frame and exit"},
			&cli.IntFlag{Name: "jobs", Aliases: []string{"n"}, Value: 30, Usage: "show at most `N` jobs of the queue (0: all)"},
		},
		Action: top,
	}
}

func top(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq top takes no arguments, got %q", args[0])
	}
	if c.Duration("interval") < 100*time.Millisecond {
		return invalid("--interval %s is too short; give 100ms or more", c.Duration("interval"))
	}
	if c.Int("jobs") < 0 {
		return invalid("--jobs %d: give 0 (all) or a positive number", c.Int("jobs"))
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	if c.Bool("once") {
		f, err := topFrame(c.Context, cl, c.Int("jobs"))
		if err != nil {
			return err
		}
		return format.WriteTop(c.App.Writer, f)
	}
	ctx, quit := context.WithCancel(c.Context)
	defer quit()
	restore := keysWithoutEnter(c.App.Reader)
	defer restore()
	go func() { // q quits; Ctrl-C cancels c.Context (gpuq's main)
		b := make([]byte, 1)
		for {
			n, err := c.App.Reader.Read(b)
			if err != nil || n == 1 && (b[0] == 'q' || b[0] == 'Q') {
				quit()
				return
			}
		}
	}()
	t := time.NewTicker(c.Duration("interval"))
	defer t.Stop()
	for {
		f, err := topFrame(ctx, cl, c.Int("jobs"))
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprint(termsafe.Raw(c.App.Writer), "\x1b[H\x1b[2J") // home, clear screen: ours, not escaped
		if err != nil {
			fmt.Fprintf(c.App.Writer, "gpuq top - %s: %v (retrying every %s)\n", now().Format("15:04:05"), err, c.Duration("interval"))
		} else if err := format.WriteTop(c.App.Writer, f); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// topFrame reads nodes, the queue and the newest usage.
func topFrame(ctx context.Context, cl *api.Client, maxJobs int) (format.TopFrame, error) {
	f := format.TopFrame{Now: now(), MaxJobs: maxJobs}
	var err error
	if f.Nodes, err = cl.Nodes(ctx); err != nil {
		return f, fmt.Errorf("list nodes: %w", err)
	}
	if f.Jobs, err = cl.Jobs(ctx, api.JobFilter{States: []spec.JobState{spec.StateRunning, spec.StatePending}, View: api.ViewBrief}); err != nil {
		return f, fmt.Errorf("list jobs: %w", err)
	}
	if f.Usage, err = cl.LatestUsage(ctx); err != nil {
		return f, fmt.Errorf("read GPU utilisation: %w", err)
	}
	return f, nil
}

// keysWithoutEnter puts a terminal on r into non-canonical mode without
// echo, so q quits without Enter, and returns what restores it. Ctrl-C
// still sends SIGINT. Anything but a terminal is left as it is.
func keysWithoutEnter(r io.Reader) (restore func()) {
	fh, ok := r.(*os.File)
	if !ok {
		return func() {}
	}
	fd := int(fh.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return func() {}
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
}
