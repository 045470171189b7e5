package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/loadtest"
	"github.com/gpud/gpud/gpud/process"
)

// loadtestCommand is `gpud loadtest`: a fleet of simulated node agents in
// one process against a real `gpud controller` child process over TCP/TLS.
func loadtestCommand() *cli.Command {
	return &cli.Command{
		Name:  "loadtest",
		Usage: "run N simulated node agents against a real controller and measure it (a fleet harness)",
		Description: "Starts `gpud controller` as a child process (TLS on a loopback port, its own state dir), then\n" +
			"runs --nodes real node agents (gpud/node) in this process, each with a fake runtime whose jobs\n" +
			"run for their virtual duration and exit, each authenticated with its own node token and\n" +
			"dialling from its own loopback address (127.10.x.y) as a separate host would. Users submit\n" +
			"--jobs jobs over the API from --submitters clients as fast as it takes them (C1M style) or at\n" +
			"--rate submissions/s, or\n" +
			"replay --trace's arrivals sped up --trace-speed times. It prints submissions/s, starts/s,\n" +
			"submit→start and end→node-free latencies, heartbeats/s, the controller's CPU and RSS and the\n" +
			"databases' write rates and sizes, and checks that every acknowledged job ended exactly once in\n" +
			"accounting (exit status 1 if not).",
		Flags: append(logFlags(),
			&cli.IntFlag{Name: "nodes", Value: 20, Usage: "simulated nodes"},
			&cli.IntFlag{Name: "gpus-per-node", Value: 8, Usage: "GPUs of each simulated node"},
			&cli.IntFlag{Name: "jobs", Value: 500, Usage: "jobs to submit (C1M-style burst); 0 with --hold runs heartbeats only"},
			&cli.IntFlag{Name: "submitters", Value: 4, Usage: "concurrent submitting API clients"},
			&cli.Float64Flag{Name: "rate", Usage: "offer the burst at this many submissions/s (open loop; latencies count from when each job was due); 0: each client submits its next job as soon as the last is answered"},
			&cli.DurationFlag{Name: "job-duration", Value: 2 * time.Second, Usage: "how long each burst job runs"},
			&cli.IntFlag{Name: "job-gpus", Value: 1, Usage: "GPUs each burst job asks for"},
			&cli.BoolFlag{Name: "preload", Usage: "submit the whole burst with the partition DOWN, then bring it UP (SIGHUP): measures how fast the controller starts a full queue"},
			&cli.StringFlag{Name: "trace", Usage: "replay this trace's arrivals instead of a burst (formats of gpud simulate)"},
			&cli.Float64Flag{Name: "trace-speed", Value: 1000, Usage: "speed-up of --trace (arrivals and run times)"},
			&cli.DurationFlag{Name: "hold", Usage: "keep the fleet running this long after the workload (heartbeat soak)"},
			&cli.DurationFlag{Name: "heartbeat", Value: 5 * time.Second, Usage: "controller heartbeat_interval the agents follow"},
			&cli.DurationFlag{Name: "node-timeout", Usage: "controller node_timeout (default 3 × --heartbeat)"},
			&cli.DurationFlag{Name: "usage-interval", Value: 10 * time.Second, Usage: "agents' usage sample interval (negative: none)"},
			&cli.DurationFlag{Name: "sched-interval", Value: time.Second, Usage: "controller [scheduler] interval"},
			&cli.IntFlag{Name: "max-jobs-per-cycle", Value: 1000, Usage: "controller [scheduler] max_jobs_per_cycle"},
			&cli.DurationFlag{Name: "ramp", Value: 10 * time.Second, Usage: "spread agent start-up over this long"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "give up (and fail) after this long"},
			&cli.StringFlag{Name: "dir", Usage: "work directory: controller config, state and log (default: a new temp dir, removed unless --keep)"},
			&cli.BoolFlag{Name: "memory-outbox", Usage: "keep each agent's outbox in memory, not in outbox.db: 3 fewer open files per agent (for more than ~4,000 agents under a 20,000 open-files limit)"},
			&cli.StringFlag{Name: "agent-dir", Usage: "agents' state dirs (outbox.db each); default a tmpfs dir under /dev/shm"},
			&cli.BoolFlag{Name: "keep", Usage: "keep the work directory"},
			&cli.StringFlag{Name: "gpud", Usage: "gpud binary for the controller child (default: this executable)"},
			&cli.StringFlag{Name: "plot", Usage: "write starts/s, queue depth and submit→start (p50, p99 of the jobs started each second) over the run to this .svg or .png"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write this process's (the agents' and submitters') CPU profile here (pprof)"},
			&cli.IntFlag{Name: "procs", Value: 1, Usage: "run the agents in this many child processes (gpud loadtest itself, each with its share of --nodes; the same agent code over TCP/TLS), not in this one: more than one runtime, GC and scheduler for thousands of agents"},
			&cli.BoolFlag{Name: "agents-child", Hidden: true, Usage: "internal: run the agents a parent gpud loadtest --procs gives on standard input, report on standard output"},
			&cli.IntFlag{Name: "agents-nice", Usage: "with --procs: run the agents children N (1-19) nicer than the controller (nice(1)), so that on a machine they share the controller's CPU comes first, as on a controller host of its own; their part of each latency still counts"},
			&cli.IntFlag{Name: "agents-gogc", Value: 400, Usage: "with --procs: the agents children's GC target percentage (GOGC), capped by a memory limit of a quarter of the host's memory shared among them; 0: Go's default (a GOGC or GOMEMLIMIT in the environment wins)"},
			&cli.StringFlag{Name: "agents-cpuprofile", Usage: "with --procs: write each agents child's CPU profile to this path with .N (the child's number) added (pprof)"},
			&cli.StringFlag{Name: "controller-cpuprofile", Usage: "write the controller child's CPU profile here (pprof; gpud controller --cpuprofile), finished when the run ends"},
		),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			if c.Bool("agents-child") {
				return loadtest.RunAgentsChild(c.Context, os.Stdin, os.Stdout, log)
			}
			o := loadtest.Options{
				Nodes: c.Int("nodes"), GPUsPerNode: c.Int("gpus-per-node"), Jobs: c.Int("jobs"),
				Submitters: c.Int("submitters"), JobDuration: c.Duration("job-duration"), JobGPUs: c.Int("job-gpus"),
				Trace: c.String("trace"), TraceSpeed: c.Float64("trace-speed"), Rate: c.Float64("rate"), Hold: c.Duration("hold"),
				Heartbeat: c.Duration("heartbeat"), NodeTimeout: c.Duration("node-timeout"),
				UsageInterval: c.Duration("usage-interval"), SchedInterval: c.Duration("sched-interval"),
				MaxJobsPerCycle: c.Int("max-jobs-per-cycle"), Ramp: c.Duration("ramp"), Timeout: c.Duration("timeout"),
				Dir: c.String("dir"), AgentDir: c.String("agent-dir"), Keep: c.Bool("keep"), MemoryOutbox: c.Bool("memory-outbox"), Preload: c.Bool("preload"), Gpud: c.String("gpud"),
				Plot: c.String("plot"), CtlProfile: c.String("controller-cpuprofile"), AgentsProfile: c.String("agents-cpuprofile"), AgentsGOGC: c.Int("agents-gogc"), AgentsNice: c.Int("agents-nice"), Procs: c.Int("procs"), Log: log, Out: c.App.Writer, Version: version,
			}
			if p := c.String("cpuprofile"); p != "" {
				stop, err := process.StartCPUProfile(p)
				if err != nil {
					return err
				}
				defer stop()
			}
			rep, err := loadtest.Run(c.Context, o)
			if rep != nil {
				rep.Print(c.App.Writer)
			}
			if err != nil {
				return err
			}
			if len(rep.Lost) > 0 {
				return fmt.Errorf("loadtest: %d problems with acknowledged jobs (first: %s)", len(rep.Lost), rep.Lost[0])
			}
			return nil
		},
	}
}
