package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
)

func placementList() string {
	s := make([]string, len(sched.Placements))
	for i, p := range sched.Placements {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// parseSeeds reads N, A..B or a comma list of either.
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "..")
		a, err1 := strconv.ParseUint(lo, 10, 64)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.ParseUint(hi, 10, 64)
		}
		if err1 != nil || err2 != nil || b < a || b-a >= 10000 {
			return nil, fmt.Errorf("%q is not a seed, a range A..B (A ≤ B, at most 10000 seeds) or a comma list of them", part)
		}
		for x := a; ; x++ {
			out = append(out, x)
			if x == b {
				break
			}
		}
	}
	return out, nil
}

// fgdRow is one placement's FGD results over the seeds.
type fgdRow struct {
	Placement string `json:"placement"`
	// AllocMean[k] is the mean allocation rate (percent of GPUs) at k
	// percent arrived GPU demand; Alloc100 its value at --demand.
	AllocMean []float64 `json:"alloc_mean"`
	AllocEnd  float64   `json:"alloc_at_demand"`
	AllocMin  float64   `json:"alloc_at_demand_min"`
	AllocMax  float64   `json:"alloc_at_demand_max"`
	Frag      float64   `json:"frag_at_demand"`
	Arrived   float64   `json:"tasks_arrived"`
	Placed    float64   `json:"tasks_placed"`
	WallRun   float64   `json:"wall_s_per_run"`
}

// published are the FGD paper's allocation rates at 100% arrived demand
// on openb_pod_list_default (fgd_expected_analysis_allo_discrete.csv,
// mean over seeds 42–51).
const published = "published (Weng et al., USENIX ATC'23, openb default, seeds 42–51) at 100%: Random 86.30, BestFit 92.86, FGD 95.23"

func runFGD(c *cli.Context, nodes []sim.NodeSpec, seeds []uint64) error {
	var pols []sched.Placement
	for _, s := range c.StringSlice("placement") {
		p, err := sched.ParsePlacement(s)
		if err != nil {
			return usagef("--placement: %v", err)
		}
		pols = append(pols, p)
	}
	demand := c.Int("demand")
	if demand < 1 || demand > 1000 {
		return usagef("--demand %d: give a percent of the cluster's GPUs between 1 and 1000 (the FGD paper uses 100)", demand)
	}
	f, err := trace.Open(c.String("trace"), trace.Format(c.String("format")))
	if err != nil {
		return err
	}
	jobs, err := trace.ReadAll(f, 0)
	f.Close()
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return fmt.Errorf("trace %s has no tasks", c.String("trace"))
	}
	var rows []fgdRow
	var curves []sim.Series
	for _, p := range pols {
		row := fgdRow{Placement: string(p), AllocMin: math.Inf(1), AllocMax: math.Inf(-1)}
		for _, seed := range seeds {
			r, err := sim.RunFGD(jobs, sim.FGDOptions{Nodes: nodes, Placement: p, Seed: seed, Demand: demand})
			if err != nil {
				return err
			}
			if row.AllocMean == nil {
				row.AllocMean = make([]float64, len(r.Alloc))
			}
			for k, a := range r.Alloc {
				row.AllocMean[k] += a / float64(len(seeds))
			}
			end := r.Alloc[len(r.Alloc)-1]
			row.AllocMin, row.AllocMax = min(row.AllocMin, end), max(row.AllocMax, end)
			row.Frag += r.Frag / float64(len(seeds))
			row.Arrived += float64(r.Arrived) / float64(len(seeds))
			row.Placed += float64(r.Placed) / float64(len(seeds))
			row.WallRun += r.Wall.Seconds() / float64(len(seeds))
		}
		row.AllocEnd = row.AllocMean[len(row.AllocMean)-1]
		rows = append(rows, row)
		s := sim.Series{Name: row.Placement}
		for k, a := range row.AllocMean {
			s.X, s.Y = append(s.X, float64(k)), append(s.Y, a)
		}
		curves = append(curves, s)
	}
	if dir := c.String("plot"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create plot dir: %w", err)
		}
		fh, err := os.Create(filepath.Join(dir, "alloc_curve.svg"))
		if err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
		err = sim.WriteSVG(fh, "GPU allocation rate vs arrived GPU demand", "arrived GPU demand (% of GPUs)", "allocated (% of GPUs)", false, curves)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write plot alloc_curve.svg: %w", err)
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"trace": c.String("trace"), "tasks": len(jobs), "nodes": len(nodes),
			"gpus": sim.TotalGPUs(nodes), "seeds": seeds, "demand_percent": demand, "placements": rows})
	}
	fmt.Fprintf(out, "FGD experiment: trace %s (%d tasks), cluster %d nodes, %d GPUs; shuffled arrivals, no departures, up to %d%% arrived GPU demand; %d seed(s) %s\n",
		c.String("trace"), len(jobs), len(nodes), sim.TotalGPUs(nodes), demand, len(seeds), c.String("seed"))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "placement\talloc@%d%%\tmin\tmax\talloc@90%%\talloc@80%%\tfrag@%d%%\tplaced/arrived\twall/run\t\n", demand, demand)
	at := func(r fgdRow, k int) string {
		if k >= len(r.AllocMean) {
			return "-"
		}
		return fmt.Sprintf("%.2f", r.AllocMean[k])
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.2f\t%.0f/%.0f\t%.2fs\t\n", r.Placement, r.AllocEnd, r.AllocMin, r.AllocMax,
			at(r, 90), at(r, 80), r.Frag, r.Placed, r.Arrived, r.WallRun)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, published)
	return nil
}
