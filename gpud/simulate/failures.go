package simulate

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/spec"
)

// FailureOptions are gpud simulate --failures' (the goodput study of
// docs/health.md).
type FailureOptions struct {
	// Mix names the failure mix: "meta" (Llama 3 405B's rate and causes).
	Mix string
	// Scale multiplies the rate (1: as published).
	Scale float64
	// CheckpointEvery, CheckpointCost, RestartCost, GPURepair and
	// NodeRepair are sim.Faults'.
	CheckpointEvery, CheckpointCost, RestartCost time.Duration
	GPURepair, NodeRepair                        time.Duration
}

// DefaultFailureOptions are the study's defaults.
func DefaultFailureOptions() FailureOptions {
	return FailureOptions{Mix: "meta", Scale: 1, CheckpointEvery: 30 * time.Minute, CheckpointCost: time.Minute,
		RestartCost: 5 * time.Minute, GPURepair: 12 * time.Hour, NodeRepair: 4 * time.Hour}
}

// failureArm is one side of the comparison.
type failureArm struct {
	name                      string
	wholeNode                 bool
	expedite, checkpointFirst bool
}

var failureArms = []failureArm{
	{name: "gpud: per-GPU drain + expedite + checkpoint-first", expedite: true, checkpointFirst: true},
	{name: "baseline: whole-node drain + ordinary requeue", wholeNode: true},
}

// FailureRow is one arm's run under one seed.
type FailureRow struct {
	Arm  string `json:"arm"`
	Seed uint64 `json:"seed"`
	// Goodput is useful ÷ allocated GPU-hours.
	Goodput float64 `json:"goodput"`
	// EffectiveTime is that of the interrupted jobs (Meta's measure).
	EffectiveTime   float64 `json:"effective_time_interrupted_jobs"`
	InterruptedJobs int     `json:"interrupted_jobs"`
	Failures        int     `json:"failures"`
	Interruptions   int     `json:"interruptions"`
	GPUDrains       int     `json:"gpu_drains"`
	NodeDrains      int     `json:"node_drains"`
	Readmitted      int     `json:"readmitted"`
	Expedited       int     `json:"expedited_requeues"`
	UsefulGPUh      float64 `json:"useful_gpu_hours"`
	AllocatedGPUh   float64 `json:"allocated_gpu_hours"`
	LostGPUh        float64 `json:"lost_gpu_hours"`
	OverheadGPUh    float64 `json:"overhead_gpu_hours"`
	RequeueWaitS    float64 `json:"requeue_wait_mean_s"`
	WaitMeanS       float64 `json:"wait_mean_s"`
	Wall            float64 `json:"wall_s"`
}

// runFailures replays the jobs under each arm and seed through policy p.
func runFailures(o Options, jobs []sim.Job, nodes []sim.NodeSpec, est sim.Estimate, p sim.Policy, seeds []uint64) error {
	fo := o.Failure
	if fo.Mix != "meta" {
		return spec.Errorf(spec.ErrInvalid, "--failures %q: the mix gpud knows is meta (Llama 3 405B: 419 interruptions in 54 days on 16,384 GPUs)", fo.Mix)
	}
	if fo.Scale <= 0 {
		return spec.Errorf(spec.ErrInvalid, "--failure-scale %g: give a positive multiplier of the published rate", fo.Scale)
	}
	base := health.DefaultTriage()
	whole, err := sim.WholeNode(base)
	if err != nil {
		return err
	}
	var rows []FailureRow
	for _, seed := range seeds {
		for _, arm := range failureArms {
			f := &sim.Faults{PerGPUHour: sim.MetaRate * fo.Scale, Causes: sim.MetaCauses(), Seed: seed, Triage: base,
				Expedite: arm.expedite, CheckpointFirst: arm.checkpointFirst, CheckpointEvery: fo.CheckpointEvery,
				CheckpointCost: fo.CheckpointCost, RestartCost: fo.RestartCost, GPURepair: fo.GPURepair, NodeRepair: fo.NodeRepair}
			if arm.wholeNode {
				f.Triage = whole
			}
			r, err := sim.Run(jobs, sim.Options{Nodes: nodes, Estimate: est, Policy: p, Faults: f})
			if err != nil {
				return err
			}
			s, m := r.Faults, sim.Measure(r)
			failures := 0
			for _, n := range s.Injected {
				failures += n
			}
			rows = append(rows, FailureRow{Arm: arm.name, Seed: seed, Goodput: s.Goodput(), EffectiveTime: s.EffectiveTime,
				InterruptedJobs: s.InterruptedJobs, Failures: failures, Interruptions: s.Interruptions, GPUDrains: s.GPUDrains,
				NodeDrains: s.NodeDrains, Readmitted: s.Readmitted, Expedited: s.Expedited, UsefulGPUh: s.Useful / 3600,
				AllocatedGPUh: s.Allocated / 3600, LostGPUh: s.Lost / 3600, OverheadGPUh: s.Overhead / 3600,
				RequeueWaitS: s.RequeueWait.Seconds(), WaitMeanS: m.WaitMean, Wall: r.Wall.Seconds()})
		}
	}
	out := o.Out
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"trace": o.Trace, "jobs": len(jobs), "nodes": len(nodes), "gpus": sim.TotalGPUs(nodes),
			"rate_per_gpu_hour": sim.MetaRate * fo.Scale, "options": fo, "causes": sim.CauseNames(sim.MetaCauses()), "runs": rows})
	}
	fmt.Fprintf(out, "failures: Meta's Llama 3 mix at %.3g per GPU-hour (x%g: one per %.3g h on 16,384 GPUs, one per %.3g h on these %d GPUs); checkpoint every %s, restart %s, checkpoint-first stop %s, repairs GPU %s node %s (means)\n",
		sim.MetaRate*fo.Scale, fo.Scale, 1/(sim.MetaRate*fo.Scale*16384), 1/(sim.MetaRate*fo.Scale*float64(sim.TotalGPUs(nodes))), sim.TotalGPUs(nodes),
		fo.CheckpointEvery, fo.RestartCost, fo.CheckpointCost, fo.GPURepair, fo.NodeRepair)
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\tseed\tgoodput\teffective (interrupted jobs)\tfailures\tinterrupted attempts\tGPU drains\tnode drains\tlost GPU-h\toverhead GPU-h\trequeue wait\twait mean\twall\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.3f%%\t%.2f%% of %d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t\n", short(r.Arm), r.Seed, 100*r.Goodput,
			100*r.EffectiveTime, r.InterruptedJobs, r.Failures, r.Interruptions, r.GPUDrains, r.NodeDrains, r.LostGPUh, r.OverheadGPUh,
			dur(r.RequeueWaitS), dur(r.WaitMeanS), dur(r.Wall))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, arm := range failureArms {
		var g, e []float64
		for _, r := range rows {
			if r.Arm == arm.name {
				g, e = append(g, r.Goodput), append(e, r.EffectiveTime)
			}
		}
		lo, hi, mean := rangeOf(g)
		elo, ehi, emean := rangeOf(e)
		fmt.Fprintf(out, "%s: goodput %.3f%% (%.3f-%.3f%%), effective time of interrupted jobs %.2f%% (%.2f-%.2f%%) over %d seed(s)\n",
			arm.name, 100*mean, 100*lo, 100*hi, 100*emean, 100*elo, 100*ehi, len(g))
	}
	return nil
}

func short(arm string) string {
	s, _, _ := strings.Cut(arm, ":")
	return s
}

func dur(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

func rangeOf(xs []float64) (lo, hi, mean float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi, mean = min(lo, x), max(hi, x), mean+x
	}
	return lo, hi, mean / float64(len(xs))
}
