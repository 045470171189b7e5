package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
	"github.com/gpud/gpud/gpud/spec"
)

// Options are gpud simulate's: a trace replayed through each policy, or
// with FGD the GPU-sharing allocation experiment of the FGD paper.
type Options struct {
	Trace, Format string
	// Cluster is NODESxGPUS[:MODEL][+...]; NodesFile a node list file
	// instead (one of the two).
	Cluster, NodesFile string
	// Config is the controller configuration the sched policy runs
	// under ("": built-in defaults).
	Config          string
	Policies        []string
	RuntimeEstimate string
	Jobs, Skip      int
	Windows         int
	// Seed: the window choice's; with FGD the arrival orders' (N, A..B or
	// a comma list).
	Seed string
	FGD  bool
	// Placements, Demand, Compare, Markdown, CPUNodes and Vary are FGD's.
	Placements []string
	Demand     int
	Compare    string
	Markdown   bool
	CPUNodes   bool
	Vary       []string
	JSON       bool
	// Failures: the goodput study under injected failures (Failure.Mix
	// set) instead of a policy comparison.
	Failure FailureOptions
	// Plot is a directory to write plots into ("": none).
	Plot string
	Out  io.Writer
}

// Run runs what o asks for and writes its table (or JSON) to o.Out.
func Run(o Options) error {
	est, err := sim.ParseEstimate(o.RuntimeEstimate)
	if err != nil {
		return spec.Errorf(spec.ErrInvalid, "--runtime-estimate: %v", err)
	}
	var nodes []sim.NodeSpec
	switch {
	case o.NodesFile != "" && o.Cluster != "":
		return spec.Errorf(spec.ErrInvalid, "give --cluster or --nodes, not both")
	case o.NodesFile != "":
		if nodes, err = trace.ReadNodes(o.NodesFile); err != nil {
			return err
		}
	case o.Cluster != "":
		if nodes, err = sim.ParseCluster(o.Cluster); err != nil {
			return spec.Errorf(spec.ErrInvalid, "--cluster: %v", err)
		}
	default:
		return spec.Errorf(spec.ErrInvalid, "give the cluster: --cluster 100x8:h100 (or 256x1 for SWF processors) or --nodes FILE")
	}
	seeds, err := ParseSeeds(o.Seed)
	if err != nil {
		return spec.Errorf(spec.ErrInvalid, "--seed: %v", err)
	}
	if o.FGD {
		return runFGD(o, nodes, seeds)
	}
	if len(seeds) > 1 && o.Failure.Mix == "" {
		return spec.Errorf(spec.ErrInvalid, "--seed %s: a replay takes one seed (several are for --fgd and --failures)", o.Seed)
	}
	cfg := config.Defaults()
	if p := o.Config; p != "" {
		if cfg, err = config.LoadController(p); err != nil {
			return err
		}
	}
	policies, err := simPolicies(cfg, o.Policies)
	if err != nil {
		return err
	}

	f, err := trace.Open(o.Trace, trace.Format(o.Format))
	if err != nil {
		return err
	}
	all, err := trace.ReadAll(f, 0)
	f.Close()
	if err != nil {
		return err
	}
	sim.SortBySubmit(all)
	n, skip := o.Jobs, o.Skip
	if skip > len(all) {
		return spec.Errorf(spec.ErrInvalid, "--skip %d: the trace has %d jobs", skip, len(all))
	}
	all = all[skip:]
	if n <= 0 {
		n = len(all)
	}
	if o.Failure.Mix != "" {
		if len(policies) != 1 {
			return spec.Errorf(spec.ErrInvalid, "--failures runs one policy (sched, the controller's, by default); %d given", len(policies))
		}
		return runFailures(o, all[:min(n, len(all))], nodes, est, policies[0], seeds)
	}
	starts := []int{0}
	if k := o.Windows; k > 0 {
		starts = sim.WindowStarts(len(all), n, k, seeds[0])
	}

	var rows []sim.Metrics
	var last, plotted []*sim.Result
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
		if dir := o.Plot; dir != "" {
			plotted = append(plotted, last[0])
			if err := plotResults(dir, plotted); err != nil {
				return err
			}
		}
	}
	out := o.Out
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"trace": o.Trace, "format": string(f.Format), "jobs_read": len(all) + skip, "records_skipped": *f.Skipped,
			"nodes": len(nodes), "gpus": sim.TotalGPUs(nodes), "runtime_estimate": est.Mode, "window_starts": starts,
			"window_jobs": n, "policies": rows,
		})
	}
	fmt.Fprintf(out, "trace %s (%s): %d jobs read, %d records skipped; cluster %d nodes, %d GPUs; estimate %s; %d window(s) of %d jobs\n",
		o.Trace, f.Format, len(all)+skip, *f.Skipped, len(nodes), sim.TotalGPUs(nodes), est.Mode, len(starts), n)
	return sim.WriteTable(out, rows)
}

// plotResults writes the SVGs of plots, one run per policy so far (each
// call rewrites them).
func plotResults(dir string, plots []*sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create plot dir: %w", err)
	}
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
			return nil, spec.Errorf(spec.ErrInvalid, "--policy: %v", err)
		}
		if p.Order == sim.OrderPriority {
			p.QOS, p.Partitions, p.JobQOS, p.JobPartition = sp.QOS, sp.Partitions, sp.JobQOS, sp.JobPartition
		}
		policies = append(policies, p)
	}
	return policies, nil
}
