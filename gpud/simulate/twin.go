package simulate

import (
	"cmp"
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
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/plot"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
	"github.com/gpud/gpud/gpud/spec"
)

// TwinOptions are gpud simulate --from-accounting's: the site's own
// accounting replayed under its configuration and, optionally, a changed
// one or changed hardware.
type TwinOptions struct {
	// Records are the accounting's jobs (with their attempt history);
	// Source names where they came from, for the report.
	Records []api.AcctJob
	Source  string
	// Usage is the ended GPU usage before Start (fairshare history);
	// nil: none.
	Usage []spec.GPUUsage
	// Start and End bound the replay's window (zero: open).
	Start, End time.Time
	// Current is the configuration the site runs; Changed the one to
	// compare ("": none, or the same when only the nodes change).
	Current, Changed config.Controller
	// ChangedName names Changed in the report.
	ChangedName string
	// Inventory is the cluster (gpuq nodes --json); nil: inferred from
	// the records.
	Inventory []spec.Node
	// AddNodes (NODESxGPUS[:MODEL][+...]) and RemoveNodes (host lists)
	// change the hardware of the changed run.
	AddNodes    string
	RemoveNodes []string
	// Top is how many moved jobs the report lists.
	Top  int
	JSON bool
	Plot string
	Out  io.Writer
}

// TwinRun is one replay's outcome and its measures.
type TwinRun struct {
	Name    string
	Nodes   int
	GPUs    int
	Result  *sim.TwinResult `json:"-"`
	Overall TwinGroup
	// Accounts and Partitions break the measures down.
	Accounts   []TwinGroup
	Partitions []TwinGroup
	Cycles     int
	// Skipped are periodic cycles the replay proved could decide
	// nothing and did not run.
	Skipped int
	WallMS  int64
}

// TwinGroup is one account's, partition's or the cluster's measures.
type TwinGroup struct {
	Name string
	Jobs int
	// Started and NeverStarted count the window's jobs (cancelled ones
	// that never started are in neither).
	Started      int
	NeverStarted int
	// Wait percentiles (seconds) and mean bounded slowdown.
	WaitP50, WaitP95 float64
	Slowdown         float64
	// GPUHours used in the replay; Utilisation is them over the
	// cluster's GPU-hours between the window's start and the last end.
	GPUHours    float64
	Utilisation float64
	// Share is the account's normalised fairshare share and UsageShare
	// its part of the GPU-hours; Distance = |UsageShare - Share|
	// (accounts only; the cluster's is half their sum).
	Share, UsageShare, Distance float64
	Preempted, Backfilled       int
}

// Moved is a job whose start moved between the runs.
type Moved struct {
	ID                   spec.JobID
	User, Account        string
	Partition            string
	Real                 time.Time `json:",omitzero"`
	Current, Changed     time.Time
	MovedSeconds         float64
	CurrentWait, NewWait float64
}

// Fidelity compares the current run's starts with the real ones.
type Fidelity struct {
	// Jobs started both in the accounting and in the replay (fixed
	// jobs left out).
	Jobs int
	// Within is the share of them that started within one scheduling
	// interval (IntervalSeconds) of their real start.
	IntervalSeconds float64
	Within          float64
	P50, P95, P99   float64
	Max             float64
	// Diffs are the signed differences (replay − real), seconds.
	Diffs []float64 `json:"-"`
}

// TwinReport is the what-if report.
type TwinReport struct {
	Source   string
	Start    time.Time `json:",omitzero"`
	End      time.Time `json:",omitzero"`
	Stats    trace.AccountingStats
	Inferred bool // the inventory was inferred from the records
	Current  TwinRun
	Changed  *TwinRun `json:",omitempty"`
	Fidelity Fidelity
	Moved    []Moved `json:",omitempty"`
}

// RunTwin replays o.Records and writes the report.
func RunTwin(o TwinOptions) (*TwinReport, error) {
	if o.Plot != "" {
		// Said before the replays, not after them.
		if ext := strings.ToLower(filepath.Ext(o.Plot)); ext != ".svg" && ext != ".png" {
			return nil, spec.Errorf(spec.ErrInvalid, "--plot %q: name a .svg or .png file", o.Plot)
		}
	}
	jobs, stats, err := trace.FromAccounting(o.Records, o.Start, o.End)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, spec.Errorf(spec.ErrInvalid, "no job of the accounting (%d records) falls in the window: check --start and --end", stats.Records)
	}
	start := o.Start
	if start.IsZero() {
		start = jobs[0].Submit.Truncate(time.Second)
	}
	inv, inferred := o.Inventory, false
	if len(inv) == 0 {
		inv, inferred = InferInventory(o.Records), true
	}
	if len(inv) == 0 {
		return nil, spec.Errorf(spec.ErrInvalid, "no node inventory: give --inventory (gpuq nodes --json); the records name no node to infer it from")
	}
	rep := &TwinReport{Source: o.Source, Start: o.Start, End: o.End, Stats: stats, Inferred: inferred}
	cur, err := replay("current", o.Current, inv, jobs, start, o.Usage)
	if err != nil {
		return nil, err
	}
	rep.Current = *cur
	rep.Fidelity = fidelity(cur, o.Current.Scheduler.Interval.Std())
	if o.ChangedName != "" || o.AddNodes != "" || len(o.RemoveNodes) > 0 {
		cinv, err := ChangeNodes(inv, o.AddNodes, o.RemoveNodes)
		if err != nil {
			return nil, err
		}
		name := o.ChangedName
		if name == "" {
			name = "changed"
		}
		cfg := o.Current
		if o.ChangedName != "" {
			cfg = o.Changed
		}
		ch, err := replay(name, cfg, cinv, jobs, start, o.Usage)
		if err != nil {
			return nil, err
		}
		rep.Changed = ch
		rep.Moved = moved(cur, ch, o.Top)
	}
	if o.Plot != "" {
		if err := plotTwin(o.Plot, rep); err != nil {
			return nil, err
		}
	}
	if o.Out != nil {
		if o.JSON {
			enc := json.NewEncoder(o.Out)
			enc.SetIndent("", "  ")
			return rep, enc.Encode(rep)
		}
		return rep, writeTwin(o.Out, rep)
	}
	return rep, nil
}

// replay runs jobs under cfg on inv.
func replay(name string, file config.Controller, inv []spec.Node, jobs []sim.TwinJob, start time.Time, usage []spec.GPUUsage) (*TwinRun, error) {
	cc, err := controller.FromConfig(file)
	if err != nil {
		return nil, fmt.Errorf("%s configuration: %w", name, err)
	}
	rp := cc.ReplayPolicy()
	nodes := SchedNodes(inv, rp.PartitionsOf)
	pol := sim.TwinPolicy{Config: rp.Config, QOS: rp.QOS, Partitions: rp.Partitions, DownPartitions: rp.DownPartitions,
		BasePriority: rp.BasePriority, Interval: cc.SchedInterval, Accounts: rp.Accounts, Fairshare: rp.Fairshare,
		AccountLimits: rp.AccountLimits}
	past := PastUsage(usage, start, rp.Fairshare)
	r, err := sim.RunTwin(slices.Clone(jobs), sim.TwinOptions{Nodes: nodes, Policy: pol, Start: start, Past: past})
	if err != nil {
		return nil, err
	}
	run := &TwinRun{Name: name, Nodes: len(nodes), GPUs: r.TotalGPUs, Result: r, Cycles: r.Cycles, Skipped: r.Skipped, WallMS: r.Wall.Milliseconds()}
	measure(run, rp.Accounts)
	return run, nil
}

// SchedNodes are the inventory's nodes as a cycle's snapshot has them,
// everything free, in name order (the controller's).
func SchedNodes(inv []spec.Node, partitionsOf func(string) []string) []sched.Node {
	out := make([]sched.Node, 0, len(inv))
	for _, n := range inv {
		sn := sched.Node{Name: n.Name, State: spec.NodeIdle, Features: n.Features, Partitions: partitionsOf(n.Name),
			CPUs: n.CPUs, FreeCPUs: n.CPUs, MemMiB: n.MemMiB, FreeMemMiB: n.MemMiB}
		for _, g := range n.GPUs {
			sn.GPUs = append(sn.GPUs, sched.GPU{UUID: g.UUID, Model: g.Model, Free: true, FreeFraction: 1,
				Unhealthy: g.Health != "" && g.Health != "ok", NUMANode: g.NUMANode})
		}
		out = append(out, sn)
	}
	slices.SortFunc(out, func(a, b sched.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Inferred nodes: CPUs and memory the records cannot tell are no
// constraint.
const (
	inferredCPUs   = 1 << 16
	inferredMemMiB = 1 << 40
)

// InferInventory builds the cluster from the records when no inventory
// is given: every node a job ran on, with the GPUs single-node jobs held
// there (a multi-node job's record does not say which node held which
// device) and the model recorded.
func InferInventory(recs []api.AcctJob) []spec.Node {
	gpus := map[string]map[string]string{} // node → uuid → model
	var names []string
	for i := range recs {
		r := &recs[i]
		for _, n := range r.Nodes {
			if _, ok := gpus[n]; !ok {
				gpus[n] = map[string]string{}
				names = append(names, n)
			}
		}
		if len(r.Nodes) == 1 && r.GPUProfile == "" {
			for _, u := range r.GPUs {
				gpus[r.Nodes[0]][u] = r.GPUModel
			}
		}
	}
	slices.Sort(names)
	var out []spec.Node
	for _, n := range names {
		node := spec.Node{Inventory: spec.Inventory{Name: n, CPUs: inferredCPUs, MemMiB: inferredMemMiB}}
		for _, u := range slices.Sorted(mapsKeys(gpus[n])) {
			node.GPUs = append(node.GPUs, spec.GPU{UUID: u, Model: gpus[n][u]})
		}
		out = append(out, node)
	}
	return out
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// ChangeNodes removes the nodes the host lists name and adds nodes of a
// cluster spec (NODESxGPUS[:MODEL][+...]); added nodes are named
// sim-added-N and have the CPUs and memory of the inventory's largest
// node (or the spec's defaults).
func ChangeNodes(inv []spec.Node, add string, remove []string) ([]spec.Node, error) {
	drop := map[string]bool{}
	var errs []string
	for _, h := range remove {
		names, err := hostlist.Expand(h)
		if err != nil {
			errs = append(errs, fmt.Sprintf("--remove-nodes %q: %v", h, err))
			continue
		}
		for _, n := range names {
			drop[n] = true
		}
	}
	out := make([]spec.Node, 0, len(inv))
	for _, n := range inv {
		if drop[n.Name] {
			delete(drop, n.Name)
			continue
		}
		out = append(out, n)
	}
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range drop {
			if !yield(k) {
				return
			}
		}
	}) {
		errs = append(errs, fmt.Sprintf("--remove-nodes: node %s is not in the inventory", n))
	}
	if add != "" {
		specs, err := sim.ParseCluster(add)
		if err != nil {
			errs = append(errs, "--add-nodes: "+err.Error())
		}
		cpus, mem := 0, int64(0)
		for _, n := range inv {
			cpus, mem = max(cpus, n.CPUs), max(mem, n.MemMiB)
		}
		for k, s := range specs {
			name := "sim-added-" + strconv.Itoa(k+1)
			n := spec.Node{Inventory: spec.Inventory{Name: name, CPUs: cmp.Or(cpus, s.CPUs), MemMiB: cmp.Or(mem, s.MemMiB)}}
			for g := range s.GPUs {
				n.GPUs = append(n.GPUs, spec.GPU{UUID: fmt.Sprintf("%s-gpu%d", name, g), Model: s.Model})
			}
			out = append(out, n)
		}
	}
	if len(errs) > 0 {
		return nil, spec.Errorf(spec.ErrInvalid, "%s", strings.Join(errs, "; "))
	}
	if len(out) == 0 {
		return nil, spec.Errorf(spec.ErrInvalid, "--remove-nodes leaves no node")
	}
	return out, nil
}

// PastUsage bills the usage that ended before start, decayed to start,
// per (account, user).
func PastUsage(usage []spec.GPUUsage, start time.Time, cfg fairshare.Config) []fairshare.Past {
	by := map[[2]string]*fairshare.Past{}
	var keys [][2]string
	for _, u := range usage {
		end := u.End
		if end.IsZero() || end.After(start) {
			continue
		}
		k := [2]string{u.Account, u.User}
		p := by[k]
		if p == nil {
			p = &fairshare.Past{Account: u.Account, User: u.User, At: start}
			by[k] = p
			keys = append(keys, k)
		}
		fu := fairshare.Usage{Account: u.Account, User: u.User, Start: u.Start, End: end, GPUs: u.GPUs, Model: u.Model}
		p.Add(&fu, &cfg)
	}
	out := make([]fairshare.Past, 0, len(keys))
	for _, k := range keys {
		out = append(out, *by[k])
	}
	return out
}

// measure fills run's overall, per-account and per-partition measures.
func measure(run *TwinRun, accounts *fairshare.Tree) {
	r := run.Result
	var last time.Time
	for i := range r.Res {
		if r.Res[i].Started && r.Res[i].End.After(last) {
			last = r.Res[i].End
		}
	}
	span := last.Sub(r.Start).Hours()
	capacity := float64(r.TotalGPUs) * span
	type acc struct {
		g     TwinGroup
		waits []float64
		slow  float64
	}
	groups := map[string]*acc{}
	get := func(kind, name string) *acc {
		a := groups[kind+"\x00"+name]
		if a == nil {
			a = &acc{g: TwinGroup{Name: name}}
			groups[kind+"\x00"+name] = a
		}
		return a
	}
	for i := range r.Jobs {
		j, res := &r.Jobs[i], &r.Res[i]
		if j.Fixed || res.Cancelled && !res.Started {
			continue
		}
		gh := gpuHours(j, res)
		for _, a := range []*acc{get("all", ""), get("account", j.Account), get("partition", j.Partition)} {
			a.g.Jobs++
			a.g.GPUHours += gh
			a.g.Preempted += res.Preempted
			if res.Backfilled {
				a.g.Backfilled++
			}
			if !res.Started {
				a.g.NeverStarted++
				continue
			}
			a.g.Started++
			wait := res.Start.Sub(eligible(j, r.Start))
			a.waits = append(a.waits, wait.Seconds())
			a.slow += sim.BoundedSlowdown(wait, j.Runtime)
		}
	}
	shares := map[string]float64{}
	if accounts != nil {
		rep := fairshare.Compute(accounts, nil, r.Start, fairshare.Config{})
		for _, row := range rep.Rows {
			if row.User == "" && row.Depth == 1 {
				shares[row.Account] = row.NormShares
			}
		}
	}
	all := get("all", "")
	finish := func(a *acc) TwinGroup {
		slices.Sort(a.waits)
		a.g.WaitP50, a.g.WaitP95 = sim.Percentile(a.waits, 50), sim.Percentile(a.waits, 95)
		if a.g.Started > 0 {
			a.g.Slowdown = a.slow / float64(a.g.Started)
		}
		if capacity > 0 {
			a.g.Utilisation = a.g.GPUHours / capacity
		}
		return a.g
	}
	run.Overall = finish(all)
	for key, a := range groups {
		kind, _, _ := strings.Cut(key, "\x00")
		switch kind {
		case "account":
			g := finish(a)
			if all.g.GPUHours > 0 {
				g.UsageShare = g.GPUHours / all.g.GPUHours
			}
			if s, ok := shares[g.Name]; ok {
				g.Share = s
				g.Distance = math.Abs(g.UsageShare - g.Share)
				run.Overall.Distance += g.Distance / 2
			}
			run.Accounts = append(run.Accounts, g)
		case "partition":
			run.Partitions = append(run.Partitions, finish(a))
		}
	}
	byName := func(a, b TwinGroup) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(run.Accounts, byName)
	slices.SortFunc(run.Partitions, byName)
}

// eligible is when j could first start in the replay.
func eligible(j *sim.TwinJob, start time.Time) time.Time {
	t := j.Submit
	if j.Begin.After(t) {
		t = j.Begin
	}
	if start.After(t) {
		t = start
	}
	return t
}

// gpuHours is what j's runs held in the replay (its last run from its
// first start: a preempted run's hours are approximated by the rerun).
func gpuHours(j *sim.TwinJob, res *sim.TwinJobResult) float64 {
	if !res.Started {
		return 0
	}
	g := float64(j.Req.Nodes * j.Req.GPUsPerNode)
	if f := j.Req.GPUFraction; f > 0 && f < 1 {
		g = f
	}
	run := j.Runtime
	if j.TimeLimit > 0 {
		run = min(run, j.TimeLimit)
	}
	return g * run.Hours()
}

// fidelity compares the current run's first starts with the real ones.
func fidelity(run *TwinRun, interval time.Duration) Fidelity {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	f := Fidelity{IntervalSeconds: interval.Seconds()}
	r := run.Result
	var abs []float64
	within := 0
	for i := range r.Jobs {
		j, res := &r.Jobs[i], &r.Res[i]
		if j.Fixed || !res.Started || j.RealStart.IsZero() {
			continue
		}
		d := res.Start.Sub(j.RealStart).Seconds()
		f.Diffs = append(f.Diffs, d)
		abs = append(abs, math.Abs(d))
		if math.Abs(d) <= interval.Seconds() {
			within++
		}
	}
	f.Jobs = len(abs)
	if f.Jobs == 0 {
		return f
	}
	slices.Sort(abs)
	f.Within = float64(within) / float64(f.Jobs)
	f.P50, f.P95, f.P99 = sim.Percentile(abs, 50), sim.Percentile(abs, 95), sim.Percentile(abs, 99)
	f.Max = abs[len(abs)-1]
	return f
}

// moved lists the top jobs whose first start moved most between runs.
func moved(cur, ch *TwinRun, top int) []Moved {
	var out []Moved
	a, b := cur.Result, ch.Result
	for i := range a.Jobs {
		j := &a.Jobs[i]
		ra, rb := &a.Res[i], &b.Res[i]
		if j.Fixed || !ra.Started || !rb.Started {
			continue
		}
		el := eligible(j, a.Start)
		out = append(out, Moved{ID: j.ID, User: j.User, Account: j.Account, Partition: j.Partition, Real: j.RealStart,
			Current: ra.Start, Changed: rb.Start, MovedSeconds: rb.Start.Sub(ra.Start).Seconds(),
			CurrentWait: ra.Start.Sub(el).Seconds(), NewWait: rb.Start.Sub(el).Seconds()})
	}
	slices.SortStableFunc(out, func(x, y Moved) int {
		return cmp.Or(cmp.Compare(math.Abs(y.MovedSeconds), math.Abs(x.MovedSeconds)), cmp.Compare(x.ID, y.ID))
	})
	if top <= 0 {
		top = 10
	}
	return out[:min(top, len(out))]
}

func fmtSec(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < 0 {
		return "-" + fmtDurShort(-d)
	}
	return fmtDurShort(d)
}

func fmtDurShort(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%.1fd", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%.1fh", d.Hours())
	case d >= time.Minute:
		return fmt.Sprintf("%.1fm", d.Minutes())
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// writeTwin prints the report as tables.
func writeTwin(w io.Writer, rep *TwinReport) error {
	st := rep.Stats
	fmt.Fprintf(w, "accounting %s: %d records, %d replayed (%d running at the start, kept in place), %d outside the window",
		rep.Source, st.Records, st.Replayed, st.Fixed, st.Outside)
	if st.NoRequest > 0 {
		fmt.Fprintf(w, ", %d without a recorded request (taken from the allocation)", st.NoRequest)
	}
	if st.Unstarted > 0 {
		fmt.Fprintf(w, ", %d never started (they run their time limit if the replay starts them)", st.Unstarted)
	}
	fmt.Fprintln(w)
	if rep.Inferred {
		fmt.Fprintln(w, "inventory inferred from the records (CPUs and memory unknown: no constraint); give --inventory for the real one")
	}
	f := rep.Fidelity
	fmt.Fprintf(w, "fidelity: %d jobs started in both; %.2f%% of the replay's starts within one scheduling interval (%s) of the real one; |difference| p50 %s, p95 %s, p99 %s, max %s\n\n",
		f.Jobs, 100*f.Within, fmtSec(f.IntervalSeconds), fmtSec(f.P50), fmtSec(f.P95), fmtSec(f.P99), fmtSec(f.Max))
	runs := []*TwinRun{&rep.Current}
	if rep.Changed != nil {
		runs = append(runs, rep.Changed)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tnodes\tGPUs\tjobs\tstarted\tnever\twait p50\twait p95\tslowdown\tGPU util\tfs distance\tpreempted\tbackfilled\tcycles\twall\t")
	for _, r := range runs {
		g := r.Overall
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.2f\t%.1f%%\t%.3f\t%d\t%d\t%d\t%s\t\n", r.Name, r.Nodes, r.GPUs, g.Jobs, g.Started,
			g.NeverStarted, fmtSec(g.WaitP50), fmtSec(g.WaitP95), g.Slowdown, 100*g.Utilisation, g.Distance, g.Preempted, g.Backfilled,
			r.Cycles, (time.Duration(r.WallMS) * time.Millisecond).String())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, by := range []struct {
		title string
		get   func(*TwinRun) []TwinGroup
		share bool
	}{{"account", func(r *TwinRun) []TwinGroup { return r.Accounts }, true}, {"partition", func(r *TwinRun) []TwinGroup { return r.Partitions }, false}} {
		fmt.Fprintf(w, "\nper %s:\n", by.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := by.title + "\trun\tjobs\tnever\twait p50\twait p95\tslowdown\tGPU-h\tGPU util\tpreempted\tbackfilled\t"
		if by.share {
			hdr += "share\tused\tdistance\t"
		}
		fmt.Fprintln(tw, hdr)
		for gi, g := range by.get(runs[0]) {
			for _, r := range runs {
				gs := by.get(r)
				if gi >= len(gs) {
					continue
				}
				x := gs[gi]
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%.2f\t%.1f\t%.1f%%\t%d\t%d\t", cmp.Or(g.Name, "(none)"), r.Name, x.Jobs, x.NeverStarted,
					fmtSec(x.WaitP50), fmtSec(x.WaitP95), x.Slowdown, x.GPUHours, 100*x.Utilisation, x.Preempted, x.Backfilled)
				if by.share {
					fmt.Fprintf(tw, "%.1f%%\t%.1f%%\t%.3f\t", 100*x.Share, 100*x.UsageShare, x.Distance)
				}
				fmt.Fprintln(tw)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Moved) > 0 {
		fmt.Fprintf(w, "\njobs whose start moved most (%s vs current):\n", rep.Changed.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "job\tuser\taccount\tpartition\twait current\twait changed\tmoved\t")
		for _, m := range rep.Moved {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.ID, m.User, m.Account, m.Partition, fmtSec(m.CurrentWait), fmtSec(m.NewWait), fmtSec(m.MovedSeconds))
		}
		return tw.Flush()
	}
	return nil
}

// plotTwin writes the report's figure: wait CDFs of both runs, GPU
// utilisation over time, per-account p95 wait, and the fidelity's
// differences.
func plotTwin(path string, rep *TwinReport) error {
	runs := []*TwinRun{&rep.Current}
	if rep.Changed != nil {
		runs = append(runs, rep.Changed)
	}
	waits := plot.Lines{Title: "Wait time CDF", XLabel: "wait (log scale)", YLabel: "fraction of jobs", LogX: true,
		XTick: func(v float64) string { return fmtSec(v) }}
	util := plot.Lines{Title: "GPU utilisation over time", XLabel: "days from the window's start", YLabel: "allocated / total GPUs"}
	var bars plot.Bars
	bars.Title, bars.XLabel = "p95 wait per account (hours)", "hours"
	for _, r := range runs {
		var ws []float64
		for i := range r.Result.Res {
			res, j := &r.Result.Res[i], &r.Result.Jobs[i]
			if res.Started && !j.Fixed {
				ws = append(ws, res.Start.Sub(eligible(j, r.Result.Start)).Seconds())
			}
		}
		slices.Sort(ws)
		waits.Series = append(waits.Series, sim.CDF(r.Name, ws))
		util.Series = append(util.Series, utilisation(r))
		for _, g := range r.Accounts {
			bars.Labels = append(bars.Labels, cmp.Or(g.Name, "(none)")+" "+r.Name)
			bars.Values = append(bars.Values, g.WaitP95/3600)
		}
	}
	charts := []plot.Chart{waits, util, bars}
	if d := rep.Fidelity.Diffs; len(d) > 0 {
		charts = append(charts, fidelityHistogram(d, rep.Fidelity.IntervalSeconds))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	err = plot.Write(fh, path, charts...)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// fidelityHistogram bins the replay-minus-real start differences in
// scheduling intervals.
func fidelityHistogram(diffs []float64, interval float64) plot.Bars {
	labels := []string{"< -10 iv", "-10..-2 iv", "-2..-1 iv", "within 1 iv", "1..2 iv", "2..10 iv", "> 10 iv"}
	counts := make([]float64, len(labels))
	for _, d := range diffs {
		x := d / interval
		k := 3
		switch {
		case x < -10:
			k = 0
		case x < -2:
			k = 1
		case x < -1:
			k = 2
		case x > 10:
			k = 6
		case x > 2:
			k = 5
		case x > 1:
			k = 4
		}
		counts[k]++
	}
	return plot.Bars{Title: fmt.Sprintf("replay − real start, in scheduling intervals (%gs), %d jobs", interval, len(diffs)),
		XLabel: "jobs", Labels: labels, Values: counts}
}

// utilisation is the allocated share of GPUs over time (days), averaged
// over at most 300 buckets.
func utilisation(r *TwinRun) plot.Series {
	res := &sim.Result{Policy: r.Name, Busy: r.Result.Busy, TotalGPUs: r.Result.TotalGPUs}
	return sim.UtilisationSeries(res)
}
