package node

import (
	"context"
	"fmt"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/gpu"
)

// usagePoint is where the last sample of an allocation ended.
type usagePoint struct {
	at  time.Time
	cpu float64 // the cgroup's CPU seconds then
}

// usageLoop samples every running job each Config.UsageInterval and puts
// the samples in the outbox, which delivers them like any event: a sample
// observed is a sample kept, and its ID makes a re-delivery harmless.
// The interval of a job's last sample to its exit is not sampled.
func (a *Agent) usageLoop(ctx context.Context) {
	if a.cfg.UsageInterval < 0 {
		return
	}
	// Paced in real time, like heartbeats (or by the ticks a test
	// injects); the samples' times are job time (a.clock).
	ticks := a.opts.usageTicks
	if ticks == nil {
		t := time.NewTicker(a.cfg.UsageInterval)
		defer t.Stop()
		ticks = t.C
	}
	last := map[string]usagePoint{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		a.sampleUsage(ctx, last)
	}
}

// sampleUsage takes one sample of every running job whose owner is known
// (an adopted container waits for the controller's answer) and forgets
// the jobs that ended.
func (a *Agent) sampleUsage(ctx context.Context, last map[string]usagePoint) {
	now := a.clock.Now()
	jobs := a.RunningJobs()
	var byUUID map[string]gpu.Sample
	if a.opts.sampler != nil && len(jobs) > 0 {
		samples, err := a.opts.sampler.Sample(ctx)
		if err != nil {
			a.log.Warn("sample GPUs for usage accounting; this interval has no GPU readings", "err", err)
		}
		byUUID = make(map[string]gpu.Sample, len(samples))
		for _, s := range samples {
			byUUID[s.UUID] = s
		}
	}
	reader, _ := a.rt.(runtime.UsageReader)
	live := make(map[string]bool, len(jobs))
	var evs []api.AllocEvent
	for _, j := range jobs {
		live[j.AllocID] = true
		if j.Attempt == 0 {
			continue // owner not known yet
		}
		prev, seen := last[j.AllocID]
		if !seen {
			prev = usagePoint{at: j.Start}
			if prev.at.IsZero() || prev.at.After(now) {
				prev.at = now
			}
		}
		var tu runtime.TaskUsage
		if reader != nil {
			if id := a.containerOf(j.AllocID); id != "" {
				var err error
				if tu, err = reader.TaskUsage(ctx, id); err != nil {
					a.log.Debug("read cgroup usage", "alloc_id", j.AllocID, "err", err)
				} else {
					a.mu.Lock()
					a.cgroups[j.AllocID] = tu
					a.mu.Unlock()
				}
			}
		}
		if !now.After(prev.at) {
			if !seen {
				last[j.AllocID] = prev
			}
			continue
		}
		last[j.AllocID] = usagePoint{at: now, cpu: tu.CPUSeconds}
		u := jobSample(j, byUUID, prev, now, tu)
		u.ID = fmt.Sprintf("%s/%s/%d", a.cfg.Name, j.AllocID, now.UnixNano())
		evs = append(evs, api.AllocEvent{Node: a.cfg.Name, AllocID: j.AllocID, JobID: j.JobID, Kind: api.EventUsage,
			Time: spec.NewTime(now), Usage: &u})
	}
	// One commit for the sampling's events, not one per job.
	if len(evs) > 0 {
		if err := a.ob.recordAll(context.WithoutCancel(ctx), evs, make([]uint64, len(evs))); err != nil {
			a.log.Error("keep usage samples in the outbox; they are lost", "jobs", len(evs), "err", err)
		}
	}
	for id := range last {
		if !live[id] {
			delete(last, id)
		}
	}
	a.mu.Lock()
	for id := range a.cgroups {
		if !live[id] {
			delete(a.cgroups, id)
		}
	}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// jobSample turns the readings of j's GPUs and cgroup into its sample of
// (prev.at, now]. A GPU share's power and memory count its fraction.
func jobSample(j RunningJob, byUUID map[string]gpu.Sample, prev usagePoint, now time.Time, tu runtime.TaskUsage) api.UsageSample {
	u := api.UsageSample{Attempt: j.Attempt, Start: spec.NewTime(prev.at), End: spec.NewTime(now),
		CPUSeconds: max(tu.CPUSeconds-prev.cpu, 0), MemMiB: float64(tu.MemBytes) / (1 << 20), MemPeakMiB: float64(tu.MemPeakBytes) / (1 << 20)}
	share := 1.0
	if j.GPUFraction > 0 {
		share = j.GPUFraction
	}
	var utilSum float64
	for _, uuid := range j.GPUs {
		s, ok := byUUID[uuid]
		if !ok || !s.HasUtil {
			continue
		}
		u.GPUs++
		utilSum += s.UtilPct
		u.GPUUtilMax = max(u.GPUUtilMax, s.UtilPct)
		if s.HasMem {
			u.GPUMemMiB += s.MemUsedMiB * share
		}
		if s.HasPower {
			u.PowerW += s.PowerW * share
		}
	}
	if u.GPUs > 0 {
		u.GPUUtilAvg = utilSum / float64(u.GPUs)
	}
	u.EnergyJ = u.PowerW * now.Sub(prev.at).Seconds()
	return u
}

// containerOf is the container ID of alloc's runner ("" if none).
func (a *Agent) containerOf(alloc string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.runners[alloc]; r != nil {
		return r.id
	}
	return ""
}
