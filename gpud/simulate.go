package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/simulate"
)

func simulateCommand() *cli.Command {
	return &cli.Command{
		Name:  "simulate",
		Usage: "replay a workload trace through the production scheduler in virtual time and compare policies",
		Description: "Reads a trace (SWF, Philly, ITP, Tiresias or Alibaba openb; gzip too), builds a cluster from\n" +
			"--cluster or --nodes, and runs each --policy: fcfs (strict, no backfill), fcfs-easy-sim and\n" +
			"sjf-easy-sim (the simulator's EASY baseline, placements by sched.Schedule), sjf (oracle order),\n" +
			"sched (alias multifactor: sched.Schedule exactly as the controller calls it, with --config).\n" +
			"With --fgd it runs the GPU-sharing allocation experiment of the FGD paper instead: tasks in a\n" +
			"seeded random order, no departures, until the arrived GPU demand reaches --demand percent of the\n" +
			"cluster; it reports the GPU allocation rate per --placement, averaged over --seed (e.g. 42..51).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace file (.gz is read transparently)", Required: true},
			&cli.StringFlag{Name: "format", Usage: "swf, philly, philly-vc, itp, tiresias, openb or auto", Value: "auto"},
			&cli.StringFlag{Name: "cluster", Usage: "cluster spec NODESxGPUS[:MODEL][+...], e.g. 100x8:h100, or 256x1 for SWF processors"},
			&cli.StringFlag{Name: "nodes", Usage: "node list file (openb or PAI machine CSV) instead of --cluster"},
			&cli.StringFlag{Name: "config", Usage: "controller configuration (TOML) for the sched policy; default: built-in defaults"},
			&cli.StringSliceFlag{Name: "policy", Usage: "policy to run (repeatable): " + strings.Join(sim.Policies, ", "),
				Value: cli.NewStringSlice("fcfs", "fcfs-easy-sim", "sjf-easy-sim", "sched")},
			&cli.StringFlag{Name: "runtime-estimate", Usage: "what the scheduler is told: exact, trace, user (a time limit) or xN", Value: "exact"},
			&cli.IntFlag{Name: "jobs", Usage: "jobs per run (0: all)"},
			&cli.IntFlag{Name: "skip", Usage: "skip this many jobs first"},
			&cli.IntFlag{Name: "windows", Usage: "run this many random windows of --jobs jobs (seeded by --seed) and average"},
			&cli.StringFlag{Name: "seed", Usage: "seed for window choice; with --fgd seeds of the arrival order: N, A..B or a comma list", Value: "1"},
			&cli.BoolFlag{Name: "fgd", Usage: "run the FGD allocation-rate experiment (shuffled arrivals, no departures) instead of a replay"},
			&cli.StringSliceFlag{Name: "placement", Usage: "with --fgd, placements to compare (repeatable): " + simulate.PlacementList(),
				Value: cli.NewStringSlice(simulate.DefaultPlacements()...)},
			&cli.IntFlag{Name: "demand", Usage: "with --fgd, the arrived GPU demand (percent of the cluster's GPUs) to report at", Value: 100},
			&cli.StringFlag{Name: "compare", Usage: "with --fgd, the FGD paper's published curves (fgd_expected_analysis_allo_discrete.csv) to compare against at every k"},
			&cli.BoolFlag{Name: "markdown", Usage: "with --fgd, print the results as a Markdown table (the README's, with --compare)"},
			&cli.BoolFlag{Name: "cpu-nodes", Usage: "with --fgd, let the node list's CPU-only nodes take part (the paper leaves them out)"},
			&cli.StringSliceFlag{Name: "vary", Usage: "with --fgd, replay one experiment choice as gpud's earlier setup made it (docs/simulator.md): tie=name|random, arrivals=reshuffle, metric=first, memory=off"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.StringFlag{Name: "plot", Usage: "write wait/JCT CDFs and utilisation over time as SVG into this directory"},
		},
		Action: func(c *cli.Context) error {
			return simulate.Run(simulate.Options{
				Trace: c.String("trace"), Format: c.String("format"), Cluster: c.String("cluster"), NodesFile: c.String("nodes"),
				Config: c.String("config"), Policies: c.StringSlice("policy"), RuntimeEstimate: c.String("runtime-estimate"),
				Jobs: c.Int("jobs"), Skip: c.Int("skip"), Windows: c.Int("windows"), Seed: c.String("seed"),
				FGD: c.Bool("fgd"), Placements: c.StringSlice("placement"), Demand: c.Int("demand"), Compare: c.String("compare"),
				Markdown: c.Bool("markdown"), CPUNodes: c.Bool("cpu-nodes"), Vary: c.StringSlice("vary"),
				JSON: c.Bool("json"), Plot: c.String("plot"), Out: c.App.Writer,
			})
		},
	}
}
