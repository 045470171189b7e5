package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// MIGConfig lets the agent partition its MIG GPUs for jobs.
type MIGConfig struct {
	MIG gpu.MIG
	// Modes maps GPU UUID → spec.MIGStatic or spec.MIGDynamic; GPUs not
	// listed are never touched.
	Modes map[string]string
	// CDI is where the node's MIG CDI spec is (re)written whenever
	// instances change.
	CDIDir string
	CDI    gpu.CDIOptions
	// MockDevices makes the nvidia-caps nodes of new instances (mock
	// GPUs have no driver to make them).
	MockDevices bool
}

// WithMIG lets the agent create and destroy MIG instances for jobs and
// switch MIG mode off for whole-GPU jobs on empty dynamic GPUs.
func WithMIG(m MIGConfig) Option { return func(o *options) { o.mig = &m } }

// migDevs is the agent's MIG bookkeeping: one lock around every driver
// change and CDI rewrite, and how many live allocations hold each dynamic
// GPU whole (its MIG mode is back on when the last one ends).
type migDevs struct {
	mu    sync.Mutex
	whole map[string]int
}

// migDevice is a MIG instance handed to a job.
type migDevice struct {
	UUID    string
	CDIName string
}

// acquireDevices gets the node ready for self before its container
// starts: every planned MIG slice exists (an instance at the placement is
// reused, otherwise one is created) and every dynamic MIG GPU taken whole
// has MIG mode off. On error nothing it made is left behind.
func (a *Agent) acquireDevices(ctx context.Context, log *slog.Logger, self spec.NodeAlloc) ([]migDevice, error) {
	m := a.opts.mig
	if m == nil {
		if len(self.MIG) > 0 {
			return nil, fmt.Errorf("allocation has MIG slices but node %s manages no MIG GPUs; set [node] mig", a.cfg.Name)
		}
		return nil, nil
	}
	a.migs.mu.Lock()
	defer a.migs.mu.Unlock()
	var created []gpu.MIGDevice
	undo := func() {
		for _, d := range created {
			if err := m.MIG.DestroyMIG(context.WithoutCancel(ctx), d.ParentUUID, d.UUID); err != nil {
				log.Warn("destroy MIG instance after a failed start", "gpu_uuid", d.ParentUUID, "mig_uuid", d.UUID, "err", err)
			}
		}
	}
	var devs []gpu.MIGDevice
	if len(self.MIG) > 0 {
		state, err := m.MIG.MIGState(ctx)
		if err != nil {
			return nil, err
		}
		for _, s := range self.MIG {
			if d, ok := findInstance(state, s); ok {
				devs = append(devs, d)
				continue
			}
			d, err := m.MIG.CreateMIG(ctx, s.GPU, s.Profile, s.Placement.Start)
			if err != nil {
				undo()
				return nil, err
			}
			log.Info("MIG instance created", "gpu_uuid", s.GPU, "mig_profile", s.Profile, "placement", d.Placement.String(), "mig_uuid", d.UUID)
			created = append(created, d)
			devs = append(devs, d)
		}
	}
	var switched []string
	for _, u := range self.GPUs {
		if m.Modes[u] != spec.MIGDynamic {
			continue
		}
		if a.migs.whole[u] == 0 {
			if err := m.MIG.SetMIGMode(ctx, u, false); err != nil {
				for _, s := range switched {
					if err := m.MIG.SetMIGMode(context.WithoutCancel(ctx), s, true); err != nil {
						log.Warn("switch MIG mode back on after a failed start", "gpu_uuid", s, "err", err)
					}
					a.migs.whole[s]--
				}
				undo()
				return nil, fmt.Errorf("take MIG GPU %s whole: %w", u, err)
			}
			switched = append(switched, u)
			log.Info("MIG mode off for a whole-GPU job", "gpu_uuid", u)
		}
		a.migs.whole[u]++
	}
	names, err := a.writeMIGSpec(ctx)
	if err != nil {
		undo()
		return nil, err
	}
	out := make([]migDevice, 0, len(devs))
	for _, d := range devs {
		out = append(out, migDevice{UUID: d.UUID, CDIName: names[d.UUID]})
	}
	return out, nil
}

// releaseDevices undoes acquireDevices after the job: instances on
// dynamic GPUs are destroyed and MIG mode goes back on for a dynamic GPU
// no job holds whole any more. Missing instances are fine (idempotent).
// It reports whether it destroyed an instance the registered inventory
// lists (the controller's view is then stale until the node re-registers).
func (a *Agent) releaseDevices(ctx context.Context, log *slog.Logger, self spec.NodeAlloc) (stale bool) {
	m := a.opts.mig
	if m == nil || len(self.MIG) == 0 && len(self.GPUs) == 0 {
		return false
	}
	ctx = context.WithoutCancel(ctx)
	a.migs.mu.Lock()
	defer a.migs.mu.Unlock()
	changed := false
	if len(self.MIG) > 0 {
		state, err := m.MIG.MIGState(ctx)
		if err != nil {
			log.Warn("read MIG state to release the job's instances", "err", err)
		}
		for _, s := range self.MIG {
			if m.Modes[s.GPU] != spec.MIGDynamic {
				continue // static instances stay for the next job
			}
			d, ok := findInstance(state, s)
			if !ok {
				continue
			}
			if err := m.MIG.DestroyMIG(ctx, s.GPU, d.UUID); err != nil && !errors.Is(err, gpu.ErrNotFound) {
				log.Warn("destroy MIG instance after the job", "gpu_uuid", s.GPU, "mig_uuid", d.UUID, "err", err)
				continue
			}
			changed = true
			stale = stale || a.registered(s.GPU, d.UUID)
			log.Info("MIG instance destroyed", "gpu_uuid", s.GPU, "mig_profile", s.Profile, "mig_uuid", d.UUID)
		}
	}
	for _, u := range self.GPUs {
		if m.Modes[u] != spec.MIGDynamic || a.migs.whole[u] == 0 {
			continue
		}
		if a.migs.whole[u]--; a.migs.whole[u] == 0 {
			if err := m.MIG.SetMIGMode(ctx, u, true); err != nil {
				log.Warn("switch MIG mode back on after a whole-GPU job", "gpu_uuid", u, "err", err)
			}
		}
	}
	if changed {
		if _, err := a.writeMIGSpec(ctx); err != nil {
			log.Warn("rewrite MIG CDI spec", "err", err)
		}
	}
	return stale
}

// registered reports whether the inventory lists instance migUUID on GPU
// gpuUUID.
func (a *Agent) registered(gpuUUID, migUUID string) bool {
	a.invMu.Lock()
	defer a.invMu.Unlock()
	for _, g := range a.cfg.Inventory.GPUs {
		if g.UUID == gpuUUID && slices.ContainsFunc(g.MIGSlices, func(s spec.MIGSlice) bool { return s.UUID == migUUID }) {
			return true
		}
	}
	return false
}

// findInstance finds the instance at s's placement on s's GPU.
func findInstance(state []gpu.MIGGPU, s spec.MIGSlice) (gpu.MIGDevice, bool) {
	for _, g := range state {
		if g.UUID != s.GPU {
			continue
		}
		for _, d := range g.Instances {
			if d.UUID != "" && d.Profile == s.Profile && d.Placement.Start == s.Placement.Start {
				return d, true
			}
		}
	}
	return gpu.MIGDevice{}, false
}

// writeMIGSpec rewrites the node's MIG CDI spec for every instance now on
// the node (and, for mock GPUs, makes their device nodes). Callers hold
// a.migs.mu.
func (a *Agent) writeMIGSpec(ctx context.Context) (map[string]string, error) {
	m := a.opts.mig
	state, err := m.MIG.MIGState(ctx)
	if err != nil {
		return nil, err
	}
	var all []gpu.MIGDevice
	for _, g := range state {
		all = append(all, g.Instances...)
	}
	if m.MockDevices {
		if err := gpu.MakeMockMIGDeviceNodes(m.CDI.DevRoot, all); err != nil {
			return nil, err
		}
	}
	return gpu.WriteMIGCDISpec(m.CDIDir, m.CDI, all)
}

// MIGLayout lists the instances on the node's managed MIG GPUs, as the
// inventory reports them.
func MIGLayout(state []gpu.MIGGPU) map[string][]spec.MIGSlice {
	out := map[string][]spec.MIGSlice{}
	for _, g := range state {
		for _, d := range g.Instances {
			if d.UUID == "" {
				continue
			}
			out[g.UUID] = append(out[g.UUID], spec.MIGSlice{GPU: g.UUID, Profile: d.Profile,
				Placement: spec.MIGPlacement{Start: d.Placement.Start, Size: d.Placement.Size}, UUID: d.UUID})
		}
	}
	return out
}

// refreshMIGLayout re-reads the instances into the inventory and
// registers it again, so the controller plans around instances it did not
// know of (the reason a create just failed).
func (a *Agent) refreshMIGLayout(ctx context.Context, log *slog.Logger) {
	m := a.opts.mig
	if m == nil {
		return
	}
	a.migs.mu.Lock()
	state, err := m.MIG.MIGState(ctx)
	a.migs.mu.Unlock()
	if err != nil {
		log.Warn("read MIG state to report it", "err", err)
		return
	}
	layout := MIGLayout(state)
	a.invMu.Lock()
	for i := range a.cfg.Inventory.GPUs {
		g := &a.cfg.Inventory.GPUs[i]
		if g.MIGMode != "" {
			g.MIGSlices = slices.Clone(layout[g.UUID])
		}
	}
	inv := a.inventory()
	a.invMu.Unlock()
	sent := a.opts.net.Now()
	resp, err := a.client.RegisterNode(ctx, api.RegisterRequest{Inventory: inv, Revocations: a.rev.Version()})
	if err != nil {
		log.Warn("report MIG layout to the controller", "err", err)
		return
	}
	a.learnRevocations(sent, resp.Revocations)
}
