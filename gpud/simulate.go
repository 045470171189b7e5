package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
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
			&cli.StringSliceFlag{Name: "placement", Usage: "with --fgd, placements to compare (repeatable): " + placementList(),
				Value: cli.NewStringSlice(defaultPlacements()...)},
			&cli.IntFlag{Name: "demand", Usage: "with --fgd, the arrived GPU demand (percent of the cluster's GPUs) to report at", Value: 100},
			&cli.StringFlag{Name: "compare", Usage: "with --fgd, the FGD paper's published curves (fgd_expected_analysis_allo_discrete.csv) to compare against at every k"},
			&cli.BoolFlag{Name: "markdown", Usage: "with --fgd, print the results as a Markdown table (the README's, with --compare)"},
			&cli.BoolFlag{Name: "cpu-nodes", Usage: "with --fgd, let the node list's CPU-only nodes take part (the paper leaves them out)"},
			&cli.StringSliceFlag{Name: "vary", Usage: "with --fgd, replay one experiment choice as gpud's earlier setup made it (docs/simulator.md): tie=name|random, arrivals=reshuffle, metric=first, memory=off"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.StringFlag{Name: "plot", Usage: "write wait/JCT CDFs and utilisation over time as SVG into this directory"},
		},
		Action: runSimulate,
	}
}

func runSimulate(c *cli.Context) error {
	est, err := sim.ParseEstimate(c.String("runtime-estimate"))
	if err != nil {
		return usagef("--runtime-estimate: %v", err)
	}
	var nodes []sim.NodeSpec
	switch {
	case c.String("nodes") != "" && c.String("cluster") != "":
		return usagef("give --cluster or --nodes, not both")
	case c.String("nodes") != "":
		if nodes, err = trace.ReadNodes(c.String("nodes")); err != nil {
			return err
		}
	case c.String("cluster") != "":
		if nodes, err = sim.ParseCluster(c.String("cluster")); err != nil {
			return usagef("--cluster: %v", err)
		}
	default:
		return usagef("give the cluster: --cluster 100x8:h100 (or 256x1 for SWF processors) or --nodes FILE")
	}
	seeds, err := parseSeeds(c.String("seed"))
	if err != nil {
		return usagef("--seed: %v", err)
	}
	if c.Bool("fgd") {
		return runFGD(c, nodes, seeds)
	}
	if len(seeds) > 1 {
		return usagef("--seed %s: a replay takes one seed (several are for --fgd)", c.String("seed"))
	}
	cfg := config.Defaults()
	if p := c.String("config"); p != "" {
		if cfg, err = config.LoadController(p); err != nil {
			return err
		}
	}
	policies, err := simPolicies(cfg, c.StringSlice("policy"))
	if err != nil {
		return err
	}

	f, err := trace.Open(c.String("trace"), trace.Format(c.String("format")))
	if err != nil {
		return err
	}
	all, err := trace.ReadAll(f, 0)
	f.Close()
	if err != nil {
		return err
	}
	sim.SortBySubmit(all)
	n, skip := c.Int("jobs"), c.Int("skip")
	if skip > len(all) {
		return usagef("--skip %d: the trace has %d jobs", skip, len(all))
	}
	all = all[skip:]
	if n <= 0 {
		n = len(all)
	}
	starts := []int{0}
	if k := c.Int("windows"); k > 0 {
		starts = sim.WindowStarts(len(all), n, k, seeds[0])
	}

	var rows []sim.Metrics
	var last []*sim.Result
	for _, p := range policies {
		var ms []sim.Metrics
		last = last[:0:0]
		for _, s := range starts {
			r, err := sim.Run(sim.Window(all, s, n), sim.Options{Nodes: nodes, Estimate: est, Policy: p})
			if err != nil {
				return err
			}
			ms = append(ms, sim.Measure(r))
			last = append(last, r)
		}
		rows = append(rows, sim.Average(ms))
		if dir := c.String("plot"); dir != "" {
			if err := plotResults(dir, last[0]); err != nil {
				return err
			}
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"trace": c.String("trace"), "format": string(f.Format), "jobs_read": len(all) + skip, "records_skipped": *f.Skipped,
			"nodes": len(nodes), "gpus": sim.TotalGPUs(nodes), "runtime_estimate": est.Mode, "window_starts": starts,
			"window_jobs": n, "policies": rows,
		})
	}
	fmt.Fprintf(out, "trace %s (%s): %d jobs read, %d records skipped; cluster %d nodes, %d GPUs; estimate %s; %d window(s) of %d jobs\n",
		c.String("trace"), f.Format, len(all)+skip, *f.Skipped, len(nodes), sim.TotalGPUs(nodes), est.Mode, len(starts), n)
	return sim.WriteTable(out, rows)
}

// plots accumulates one run per policy; each call rewrites the SVGs.
var plots []*sim.Result

func plotResults(dir string, r *sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create plot dir: %w", err)
	}
	plots = append(plots, r)
	var wait, jct, util []sim.Series
	for _, p := range plots {
		wait = append(wait, sim.CDF(p.Policy, p.Waits()))
		jct = append(jct, sim.CDF(p.Policy, p.JCTs()))
		util = append(util, sim.UtilisationSeries(p))
	}
	for _, pl := range []struct {
		file, title, x, y string
		log               bool
		s                 []sim.Series
	}{
		{"wait_cdf.svg", "Wait time CDF", "wait (log scale)", "fraction of jobs", true, wait},
		{"jct_cdf.svg", "Job completion time CDF", "JCT (log scale)", "fraction of jobs", true, jct},
		{"utilisation.svg", "GPU utilisation over time", "days", "allocated / total GPUs", false, util},
	} {
		fh, err := os.Create(filepath.Join(dir, pl.file))
		if err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
		err = sim.WriteSVG(fh, pl.title, pl.x, pl.y, pl.log, pl.s)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write plot %s: %w", pl.file, err)
		}
	}
	return nil
}

// simPolicies returns the named policies under cfg. The sched policy
// (alias multifactor) is the controller's: cfg maps onto gpud/sched
// through controller.FromConfig and Config.SchedPolicy, exactly as the
// controller's cycles get it, and every trace job runs in the default QOS
// and partition. Fairshare has no account tree in a trace, so its factor
// is whatever sched gives an empty tree.
func simPolicies(cfg config.Controller, names []string) ([]sim.Policy, error) {
	cc, err := controller.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	sp := cc.SchedPolicy()
	var policies []sim.Policy
	for _, name := range names {
		p, err := sim.Named(name, sp.Config, func(*sim.Job, time.Duration) int64 { return sp.JobPriority })
		if err != nil {
			return nil, usagef("--policy: %v", err)
		}
		if p.Order == sim.OrderPriority {
			p.QOS, p.Partitions, p.JobQOS, p.JobPartition = sp.QOS, sp.Partitions, sp.JobQOS, sp.JobPartition
		}
		policies = append(policies, p)
	}
	return policies, nil
}
