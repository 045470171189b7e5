package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
	"github.com/gpud/gpud/gpud/simulate"
	"github.com/gpud/gpud/gpud/spec"
)

func simulateCommand() *cli.Command {
	return &cli.Command{
		Name:  "simulate",
		Usage: "replay a workload trace, or the site's own accounting, through the production scheduler in virtual time",
		Description: "With --from-accounting it replays the site's own accounting (accounting.db, or the JSON of gpuq acct\n" +
			"--json --duplicates) between --start and --end through sched.Schedule as the controller runs it, under\n" +
			"the current gpud.toml (--current) and, with --config, a changed one, and/or with --add-nodes and\n" +
			"--remove-nodes changed hardware; it prints a what-if report per account and partition and how\n" +
			"closely the current run reproduces the real starts (docs/simulator.md).\n\n" +
			"Otherwise it reads a trace (SWF, Philly, ITP, Tiresias or Alibaba openb; gzip too), builds a cluster from\n" +
			"--cluster or --nodes, and runs each --policy: fcfs (strict, no backfill), fcfs-easy-sim and\n" +
			"sjf-easy-sim (the simulator's EASY baseline, placements by sched.Schedule), sjf (oracle order),\n" +
			"sched (alias multifactor: sched.Schedule exactly as the controller calls it, with --config).\n" +
			"With --fgd it runs the GPU-sharing allocation experiment of the FGD paper instead: tasks in a\n" +
			"seeded random order, no departures, until the arrived GPU demand reaches --demand percent of the\n" +
			"cluster; it reports the GPU allocation rate per --placement, averaged over --seed (e.g. 42..51).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace file (.gz is read transparently)"},
			&cli.StringFlag{Name: "from-accounting", Usage: "replay the site's accounting: accounting.db, or a .json export (gpuq acct --json --duplicates)"},
			&cli.TimestampFlag{Name: "start", Layout: "2006-01-02T15:04:05", Usage: "with --from-accounting, the window's start (UTC, 2006-01-02T15:04:05); default: the first submission"},
			&cli.TimestampFlag{Name: "end", Layout: "2006-01-02T15:04:05", Usage: "with --from-accounting, the window's end (UTC); jobs submitted before it are replayed"},
			&cli.StringFlag{Name: "current", Usage: "with --from-accounting, the configuration the site runs", Value: defaultControllerConfig},
			&cli.StringFlag{Name: "inventory", Usage: "with --from-accounting, the nodes (gpuq nodes --json); default: inferred from the accounting"},
			&cli.StringFlag{Name: "add-nodes", Usage: "with --from-accounting, add hardware in the changed run: NODESxGPUS[:MODEL][+...], e.g. 8x8:h200"},
			&cli.StringSliceFlag{Name: "remove-nodes", Usage: "with --from-accounting, remove nodes (host lists, repeatable) in the changed run"},
			&cli.IntFlag{Name: "top", Usage: "with --from-accounting, how many jobs whose start moved most to list", Value: 10},
			&cli.StringFlag{Name: "format", Usage: "swf, philly, philly-vc, itp, tiresias, openb or auto", Value: "auto"},
			&cli.StringFlag{Name: "cluster", Usage: "cluster spec NODESxGPUS[:MODEL][+...], e.g. 100x8:h100, or 256x1 for SWF processors"},
			&cli.StringFlag{Name: "nodes", Usage: "node list file (openb or PAI machine CSV) instead of --cluster"},
			&cli.StringFlag{Name: "config", Usage: "controller configuration (TOML) for the sched policy (default: built-in defaults); with --from-accounting the changed configuration to compare with --current"},
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
			&cli.StringFlag{Name: "failures", Usage: "inject failures and compare gpud's health policy (per-GPU drain, expedite, checkpoint-first) with whole-node drain and ordinary requeue: meta (Llama 3 405B's rate and causes); --seed N, A..B or a list (docs/health.md)"},
			&cli.Float64Flag{Name: "failure-scale", Usage: "with --failures, multiply the published rate", Value: 1},
			&cli.DurationFlag{Name: "checkpoint-every", Usage: "with --failures, how often jobs checkpoint", Value: 30 * time.Minute},
			&cli.DurationFlag{Name: "restart-cost", Usage: "with --failures, a requeued job's start-up before useful work", Value: 5 * time.Minute},
			&cli.DurationFlag{Name: "checkpoint-cost", Usage: "with --failures, a checkpoint-first stop's duration", Value: time.Minute},
			&cli.DurationFlag{Name: "gpu-repair", Usage: "with --failures, mean time until a faulted GPU reads clean again", Value: 12 * time.Hour},
			&cli.DurationFlag{Name: "node-repair", Usage: "with --failures, mean time until a failed node is back", Value: 4 * time.Hour},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
			&cli.StringFlag{Name: "plot", Usage: "write wait/JCT CDFs and utilisation over time as SVG into this directory; with --from-accounting, the what-if report's plot: a .svg or .png file"},
		},
		Action: func(c *cli.Context) error {
			if src := c.String("from-accounting"); src != "" {
				return simulateAccounting(c, src)
			}
			if c.String("trace") == "" {
				return spec.Errorf(spec.ErrInvalid, "give --trace FILE (a workload trace) or --from-accounting DB (the site's accounting)")
			}
			policies := c.StringSlice("policy")
			if c.String("failures") != "" && !c.IsSet("policy") {
				policies = []string{"sched"} // the controller's
			}
			return simulate.Run(simulate.Options{
				Trace: c.String("trace"), Format: c.String("format"), Cluster: c.String("cluster"), NodesFile: c.String("nodes"),
				Config: c.String("config"), Policies: policies, RuntimeEstimate: c.String("runtime-estimate"),
				Jobs: c.Int("jobs"), Skip: c.Int("skip"), Windows: c.Int("windows"), Seed: c.String("seed"),
				FGD: c.Bool("fgd"), Placements: c.StringSlice("placement"), Demand: c.Int("demand"), Compare: c.String("compare"),
				Markdown: c.Bool("markdown"), CPUNodes: c.Bool("cpu-nodes"), Vary: c.StringSlice("vary"),
				JSON: c.Bool("json"), Plot: c.String("plot"), Out: c.App.Writer,
				Failure: simulate.FailureOptions{Mix: c.String("failures"), Scale: c.Float64("failure-scale"),
					CheckpointEvery: c.Duration("checkpoint-every"), RestartCost: c.Duration("restart-cost"),
					CheckpointCost: c.Duration("checkpoint-cost"), GPURepair: c.Duration("gpu-repair"), NodeRepair: c.Duration("node-repair")},
			})
		},
	}
}

// simulateAccounting is gpud simulate --from-accounting: it reads the
// accounting (the database, read here because gpud/simulate touches no
// store, or a JSON export), the configurations and the inventory, and
// hands them to simulate.RunTwin.
func simulateAccounting(c *cli.Context, src string) error {
	var start, end time.Time
	if t := c.Timestamp("start"); t != nil {
		start = t.UTC()
	}
	if t := c.Timestamp("end"); t != nil {
		end = t.UTC()
	}
	if !start.IsZero() && !end.IsZero() && !end.After(start) {
		return spec.Errorf(spec.ErrInvalid, "--end %s is not after --start %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	o := simulate.TwinOptions{Source: src, Start: start, End: end, AddNodes: c.String("add-nodes"),
		RemoveNodes: c.StringSlice("remove-nodes"), Top: c.Int("top"), JSON: c.Bool("json"), Plot: c.String("plot"), Out: c.App.Writer}
	var errs []error
	cur, err := config.LoadController(c.String("current"))
	if err != nil {
		errs = append(errs, fmt.Errorf("--current: %w", err))
	}
	o.Current = cur
	if p := c.String("config"); p != "" {
		if o.Changed, err = config.LoadController(p); err != nil {
			errs = append(errs, fmt.Errorf("--config: %w", err))
		}
		o.ChangedName = "changed"
	}
	if p := c.String("inventory"); p != "" {
		if o.Inventory, err = readInventory(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if strings.HasSuffix(src, ".json") {
		f, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("--from-accounting: %w", err)
		}
		o.Records, err = trace.ReadAccountingJSON(f)
		f.Close()
		if err != nil {
			return err
		}
	} else if o.Records, o.Usage, err = readAccountingDB(c.Context, src, start, end, o.Current.Fairshare.DecayHalfLife.Std()); err != nil {
		return err
	}
	_, err = simulate.RunTwin(o)
	return err
}

// readAccountingDB reads the jobs of [start, end] with their attempts
// and, for fairshare, the usage that ended in the 30 half-lives before
// start (all of it without decay).
func readAccountingDB(ctx context.Context, path string, start, end time.Time, halfLife time.Duration) ([]api.AcctJob, []spec.GPUUsage, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, spec.Errorf(spec.ErrInvalid, "--from-accounting %s: %v (give the controller's accounting.db, or a copy of it)", path, err)
	}
	db, err := accounting.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	recs, err := db.Jobs(ctx, accounting.Filter{Start: start, End: end, NoUsage: true})
	if err != nil {
		return nil, nil, err
	}
	var requeued []spec.JobID
	for i := range recs {
		if recs[i].Attempts > 1 {
			requeued = append(requeued, recs[i].ID)
		}
	}
	attempts, err := db.Attempts(ctx, requeued)
	if err != nil {
		return nil, nil, err
	}
	jobs := make([]api.AcctJob, len(recs))
	for i := range recs {
		jobs[i] = api.AcctJob{AcctRecord: recs[i], AttemptHistory: attempts[recs[i].ID]}
	}
	var usage []spec.GPUUsage
	if !start.IsZero() {
		since := time.Time{}
		if halfLife > 0 {
			since = start.Add(-30 * halfLife)
		}
		if usage, err = db.GPUUsage(ctx, since); err != nil {
			return nil, nil, err
		}
	}
	return jobs, usage, nil
}

// readInventory reads gpuq nodes --json: an array of nodes.
func readInventory(path string) ([]spec.Node, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--inventory: %w", err)
	}
	var nodes []spec.Node
	if err := json.Unmarshal(b, &nodes); err != nil {
		return nil, spec.Errorf(spec.ErrInvalid, "--inventory %s: %v (give the JSON array gpuq nodes --json prints)", path, err)
	}
	return nodes, nil
}
