package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpud/gpud/gpud/plot"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
	"github.com/gpud/gpud/gpud/spec"
)

// PlacementList names what --fgd --placement takes: the paper's six
// policies, and sched:P for each of the production scheduler's placements.
func PlacementList() string {
	var s []string
	for _, p := range sim.PaperPolicies {
		s = append(s, string(p))
	}
	for _, p := range sched.Placements {
		s = append(s, "sched:"+string(p))
	}
	return strings.Join(s, ", ")
}

// DefaultPlacements are the six published policies and gpud's own.
func DefaultPlacements() []string {
	var s []string
	for _, p := range sim.PaperPolicies {
		s = append(s, string(p))
	}
	return append(s, "sched:"+string(sched.PlaceFGD))
}

// ParseSeeds reads N, A..B or a comma list of either.
func ParseSeeds(s string) ([]uint64, error) {
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

// fgdPlacement is one --placement: a paper policy or a sched placement.
type fgdPlacement struct {
	name  string
	paper sim.PaperPolicy
	sched sched.Placement
}

func parseFGDPlacement(s string) (fgdPlacement, error) {
	if p := sim.PaperPolicy(s); slices.Contains(sim.PaperPolicies, p) {
		return fgdPlacement{name: s, paper: p}, nil
	}
	if rest, ok := strings.CutPrefix(s, "sched:"); ok {
		p, err := sched.ParsePlacement(rest)
		if err != nil || rest == "" {
			return fgdPlacement{}, fmt.Errorf("%q: %v", s, err)
		}
		return fgdPlacement{name: s, sched: p}, nil
	}
	return fgdPlacement{}, fmt.Errorf("%q is not a placement (use %s)", s, PlacementList())
}

// fgdRow is one placement's results over the seeds.
type fgdRow struct {
	Placement string `json:"placement"`
	// AllocMean[k] is the mean allocation rate (percent of GPUs) at k
	// percent arrived GPU demand.
	AllocMean []float64 `json:"alloc_mean"`
	AllocEnd  float64   `json:"alloc_at_demand"`
	AllocMin  float64   `json:"alloc_at_demand_min"`
	AllocMax  float64   `json:"alloc_at_demand_max"`
	Arrived   float64   `json:"tasks_arrived"`
	Placed    float64   `json:"tasks_placed"`
	WallRun   float64   `json:"wall_s_per_run"`
	// Published is the paper's mean curve for this policy (with --compare).
	Published    []float64 `json:"published_mean,omitempty"`
	PubEnd       *float64  `json:"published_at_demand,omitempty"`
	PubMin       *float64  `json:"published_at_demand_min,omitempty"`
	PubMax       *float64  `json:"published_at_demand_max,omitempty"`
	MaxGap       *float64  `json:"max_abs_gap,omitempty"`
	MaxGapK      int       `json:"max_abs_gap_k,omitempty"`
	published    string
	publishedUse []uint64
}

// workloadName is the trace file's name without directory and extension,
// as the published results name workloads.
func workloadName(path string) string {
	b := filepath.Base(path)
	b = strings.TrimSuffix(b, ".gz")
	return strings.TrimSuffix(b, filepath.Ext(b))
}

func runFGD(o Options, nodes []sim.NodeSpec, seeds []uint64) error {
	var pls []fgdPlacement
	for _, s := range o.Placements {
		p, err := parseFGDPlacement(s)
		if err != nil {
			return spec.Errorf(spec.ErrInvalid, "--placement: %v", err)
		}
		pls = append(pls, p)
	}
	demand := o.Demand
	if demand < 1 || demand > 130 {
		return spec.Errorf(spec.ErrInvalid, "--demand %d: give a percent of the cluster's GPUs between 1 and 130 (the FGD paper reports 0..130 and compares at 100)", demand)
	}
	var pub *sim.Published
	if path := o.Compare; path != "" {
		var err error
		if pub, err = sim.ReadPublished(path, workloadName(o.Trace)); err != nil {
			return err
		}
	}
	f, err := trace.Open(o.Trace, trace.Format(o.Format))
	if err != nil {
		return err
	}
	jobs, err := trace.ReadAll(f, 0)
	f.Close()
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return fmt.Errorf("trace %s has no tasks", o.Trace)
	}
	variant, err := sim.ParseVariant(o.Vary)
	if err != nil {
		return spec.Errorf(spec.ErrInvalid, "--vary: %v", err)
	}
	setup, err := sim.NewPaperSetup(jobs, nodes, o.CPUNodes)
	if err != nil {
		return err
	}
	maxK := demand
	if pub != nil {
		maxK = 130
	}
	var rows []fgdRow
	for _, p := range pls {
		row := fgdRow{Placement: p.name, AllocMin: math.Inf(1), AllocMax: math.Inf(-1)}
		for _, seed := range seeds {
			opts := sim.PaperOptions{Seed: seed, MaxK: maxK, Variant: variant}
			var r *sim.PaperResult
			if p.paper != "" {
				r, err = setup.Run(p.paper, opts)
			} else {
				r, err = setup.RunSched(p.sched, opts)
			}
			if err != nil {
				return err
			}
			if row.AllocMean == nil {
				row.AllocMean = make([]float64, len(r.Alloc))
			}
			for k, a := range r.Alloc {
				row.AllocMean[k] += a / float64(len(seeds))
			}
			end := r.Alloc[demand]
			row.AllocMin, row.AllocMax = min(row.AllocMin, end), max(row.AllocMax, end)
			row.Arrived += float64(r.Arrived) / float64(len(seeds))
			row.Placed += float64(r.Placed) / float64(len(seeds))
			row.WallRun += r.Wall.Seconds() / float64(len(seeds))
		}
		row.AllocEnd = row.AllocMean[demand]
		if pub != nil && p.paper != "" {
			row.published = p.paper.PublishedName()
			row.Published, row.publishedUse = pub.Mean(row.published, seeds)
			if row.Published != nil {
				e := row.Published[demand]
				lo, hi := pub.MinMax(row.published, row.publishedUse, demand)
				row.PubEnd, row.PubMin, row.PubMax = &e, &lo, &hi
				g, gk := 0.0, 0
				for k := range min(len(row.Published), len(row.AllocMean)) {
					if d := math.Abs(row.AllocMean[k] - row.Published[k]); d > g {
						g, gk = d, k
					}
				}
				row.MaxGap, row.MaxGapK = &g, gk
			}
		}
		rows = append(rows, row)
	}
	if dir := o.Plot; dir != "" {
		if err := writeFGDPlots(dir, rows, demand, pub != nil); err != nil {
			return err
		}
	}
	out := o.Out
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"trace": o.Trace, "tasks": len(jobs), "nodes": setup.Nodes(),
			"gpus": setup.TotalGPUs(), "seeds": seeds, "demand_percent": demand, "placements": rows})
	}
	if o.Markdown {
		return writeFGDMarkdown(out, rows, demand, seeds)
	}
	fmt.Fprintf(out, "FGD experiment (as the paper's simulator runs it): trace %s (%d tasks), %d nodes, %d GPUs; seeded shuffle, tuned to 130%% of GPUs, no departures; %d seed(s) %s\n",
		o.Trace, len(jobs), setup.Nodes(), setup.TotalGPUs(), len(seeds), o.Seed)
	if vs := o.Vary; len(vs) > 0 || o.CPUNodes {
		if o.CPUNodes {
			vs = append(vs, "cpu-nodes")
		}
		fmt.Fprintf(out, "varied from the paper's setup: %s\n", strings.Join(vs, ", "))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	if pub != nil {
		fmt.Fprintf(tw, "placement\talloc@%d%%\tmin\tmax\tpaper@%d%%\tmin\tmax\tgap@%d%%\tmax |gap|\tat k\twall/run\t\n", demand, demand, demand)
	} else {
		fmt.Fprintf(tw, "placement\talloc@%d%%\tmin\tmax\talloc@90%%\talloc@80%%\tplaced/arrived\twall/run\t\n", demand)
	}
	at := func(r fgdRow, k int) string {
		if k >= len(r.AllocMean) {
			return "-"
		}
		return fmt.Sprintf("%.2f", r.AllocMean[k])
	}
	for _, r := range rows {
		if pub == nil {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.0f/%.0f\t%.2fs\t\n", r.Placement, r.AllocEnd, r.AllocMin, r.AllocMax,
				at(r, 90), at(r, 80), r.Placed, r.Arrived, r.WallRun)
			continue
		}
		if r.PubEnd == nil {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t-\t-\t-\t-\t-\t-\t%.2fs\t\n", r.Placement, r.AllocEnd, r.AllocMin, r.AllocMax, r.WallRun)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%+.2f\t%.2f\t%d\t%.2fs\t\n", r.Placement, r.AllocEnd, r.AllocMin, r.AllocMax,
			*r.PubEnd, *r.PubMin, *r.PubMax, r.AllocEnd-*r.PubEnd, *r.MaxGap, r.MaxGapK, r.WallRun)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if pub == nil {
		fmt.Fprintln(out, published)
	} else if dir := o.Plot; dir != "" {
		fmt.Fprintf(out, "every k: %s; plots: %s\n", filepath.Join(dir, "compare.csv"), filepath.Join(dir, "compare.svg"))
	}
	return nil
}

// published are the FGD paper's allocation rates at 100% arrived demand
// on openb_pod_list_default (fgd_expected_analysis_allo_discrete.csv,
// mean over seeds 42–51).
const published = "published (Weng et al., USENIX ATC'23, openb default, seeds 42–51) at 100%: Random 86.30, DotProd 90.62, GpuClustering 91.65, GpuPacking 91.78, BestFit 92.86, FGD 95.23 (--compare FILE compares every k)"

// series is a curve as plot points, NaNs left out.
func series(name string, ys []float64, last int) sim.Series {
	s := sim.Series{Name: name}
	for k, y := range ys {
		if k <= last && !math.IsNaN(y) {
			s.X, s.Y = append(s.X, float64(k)), append(s.Y, y)
		}
	}
	return s
}

// writeFGDPlots draws the mean curves (alloc_curve.svg) and, with
// published results, one chart per policy of ours against the paper's
// (compare.svg) and every k as CSV (compare.csv).
func writeFGDPlots(dir string, rows []fgdRow, demand int, compare bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create plot dir: %w", err)
	}
	last := demand
	if compare {
		last = 130
	}
	var curves []sim.Series
	var charts []plot.Chart
	var csvb strings.Builder
	csvb.WriteString("placement,published_policy,k,gpud,paper,gap\n")
	for _, r := range rows {
		curves = append(curves, series(r.Placement, r.AllocMean, last))
		if r.Published == nil {
			continue
		}
		charts = append(charts, plot.Lines{Title: fmt.Sprintf("%s: gpud against the paper (%s), max |gap| %.2f at k=%d", r.Placement, r.published, *r.MaxGap, r.MaxGapK),
			XLabel: "arrived GPU demand (% of GPUs)", YLabel: "GPU allocation (%)",
			Series: []sim.Series{series("gpud "+r.Placement, r.AllocMean, last), series("paper "+r.published, r.Published, last)}})
		for k := range min(len(r.AllocMean), len(r.Published)) {
			fmt.Fprintf(&csvb, "%s,%s,%d,%.2f,%.2f,%.2f\n", r.Placement, r.published, k, r.AllocMean[k], r.Published[k], r.AllocMean[k]-r.Published[k])
		}
	}
	write := func(name string, charts ...plot.Chart) error {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
		err = plot.Write(fh, name, charts...)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write plot %s: %w", name, err)
		}
		return nil
	}
	if err := write("alloc_curve.svg", plot.Lines{Title: "GPU allocation rate vs arrived GPU demand", XLabel: "arrived GPU demand (% of GPUs)",
		YLabel: "allocated (% of GPUs)", Series: curves}); err != nil {
		return err
	}
	if len(charts) == 0 {
		return nil
	}
	if err := write("compare.svg", charts...); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "compare.csv"), []byte(csvb.String()), 0o644); err != nil {
		return fmt.Errorf("write compare.csv: %w", err)
	}
	return nil
}

// paperNames are the published policies' names as the paper writes them.
var paperNames = map[string]string{"01-Random": "Random", "02-DotProd": "DotProd", "03-GpuClustering": "GpuClustering",
	"04-GpuPacking": "GpuPacking", "05-BestFit": "BestFit", "06-FGD": "FGD"}

// writeFGDMarkdown prints the rows as the README's table: each policy at
// --demand, paper against gpud, mean and min–max over the seeds. Rows
// without a published counterpart (sched:P) are compared with the paper's
// best policy.
func writeFGDMarkdown(out io.Writer, rows []fgdRow, demand int, seeds []uint64) error {
	best, bestName := math.Inf(-1), ""
	for _, r := range rows {
		if r.PubEnd != nil && *r.PubEnd > best {
			best, bestName = *r.PubEnd, paperNames[r.published]
		}
	}
	seedText := fmt.Sprintf("%d seeds", len(seeds))
	if len(seeds) > 0 {
		seedText = fmt.Sprintf("seeds %d–%d", seeds[0], seeds[len(seeds)-1])
	}
	fmt.Fprintf(out, "| placement (k = %d%%, %s) | paper: mean (min–max) | gpud: mean (min–max) | gpud − paper |\n|---|---|---|---|\n", demand, seedText)
	gap := func(d float64) float64 { // no "-0.00"
		if math.Abs(d) < 0.005 {
			return 0
		}
		return d
	}
	for _, r := range rows {
		ours := fmt.Sprintf("%.2f (%.2f–%.2f)", r.AllocEnd, r.AllocMin, r.AllocMax)
		switch {
		case r.PubEnd != nil:
			fmt.Fprintf(out, "| %s (`%s`) | %.2f (%.2f–%.2f) | %s | %+.2f |\n", paperNames[r.published], r.Placement, *r.PubEnd, *r.PubMin, *r.PubMax, ours, gap(r.AllocEnd-*r.PubEnd))
		case bestName != "":
			fmt.Fprintf(out, "| gpud's own, `%s` through `sched.Schedule` | best: %s %.2f | %s | %+.2f over %s |\n", r.Placement, bestName, best, ours, gap(r.AllocEnd-best), bestName)
		default:
			fmt.Fprintf(out, "| `%s` | – | %s | – |\n", r.Placement, ours)
		}
	}
	return nil
}
