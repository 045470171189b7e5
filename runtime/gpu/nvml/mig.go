package nvml

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/runtime/gpu"
)

var _ gpu.MIG = (*devices)(nil)

// MIGState implements gpu.MIG.
func (d *devices) MIGState(ctx context.Context) ([]gpu.MIGGPU, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx, "read MIG state"); err != nil {
		return nil, err
	}
	if d.lib == nil {
		return []gpu.MIGGPU{}, nil
	}
	n, ret := d.lib.DeviceGetCount()
	if err := check("DeviceGetCount", ret); err != nil {
		return nil, fmt.Errorf("read MIG state: %w", err)
	}
	out := make([]gpu.MIGGPU, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if err := check(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret); err != nil {
			return nil, fmt.Errorf("read MIG state: %w", err)
		}
		g, _, err := d.migGPU(i, h)
		if err != nil {
			return nil, fmt.Errorf("read MIG state of GPU %d: %w", i, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// SetMIGMode implements gpu.MIG.
func (d *devices) SetMIGMode(ctx context.Context, gpuUUID string, on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	verb := "off"
	if on {
		verb = "on"
	}
	if err := d.usable(ctx, "switch MIG mode"); err != nil {
		return err
	}
	_, h, err := d.byUUID(gpuUUID)
	if err != nil {
		return fmt.Errorf("switch MIG mode %s on GPU %s: %w", verb, gpuUUID, err)
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if on {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	// The first result is the activation status: not SUCCESS means the
	// change waits for a GPU reset, which MIGState reports as Pending.
	_, ret := h.SetMigMode(mode)
	if err := check("SetMigMode", ret); err != nil {
		hint := ""
		switch {
		case errors.Is(err, gpu.ErrInUse):
			hint = "; destroy its MIG instances and stop its processes first"
		case errors.Is(err, ErrNotSupported):
			hint = "; this GPU does not support MIG"
		}
		return fmt.Errorf("switch MIG mode %s on GPU %s: %w%s", verb, gpuUUID, err, hint)
	}
	return nil
}

// CreateMIG implements gpu.MIG.
func (d *devices) CreateMIG(ctx context.Context, gpuUUID, profile string, placementStart int) (gpu.MIGDevice, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fail := func(err error) (gpu.MIGDevice, error) {
		return gpu.MIGDevice{}, fmt.Errorf("create MIG %s at slice %d on GPU %s: %w", profile, placementStart, gpuUUID, err)
	}
	if err := d.usable(ctx, "create MIG instance"); err != nil {
		return gpu.MIGDevice{}, err
	}
	index, h, err := d.byUUID(gpuUUID)
	if err != nil {
		return fail(err)
	}
	g, infos, err := d.migGPU(index, h)
	if err != nil {
		return fail(err)
	}
	if !g.Capable {
		return fail(fmt.Errorf("GPU %d does not support MIG: %w", index, gpu.ErrMIGDisabled))
	}
	if !g.Mode.Current {
		return fail(fmt.Errorf("GPU %d has MIG mode off: %w; switch it on first", index, gpu.ErrMIGDisabled))
	}
	p, err := g.Profile(profile)
	if err != nil {
		return gpu.MIGDevice{}, fmt.Errorf("create MIG at slice %d: %w", placementStart, err)
	}
	var placement *gpu.MIGPlacement
	for _, pl := range p.Placements {
		if pl.Start == placementStart {
			placement = &pl
			break
		}
	}
	if placement == nil {
		return fail(fmt.Errorf("profile %s has no placement starting at slice %d (starts: %s): %w",
			profile, placementStart, placementStarts(p.Placements), gpu.ErrInsufficientResources))
	}
	info := infos[p.ID]
	gi, ret := h.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(placement.Start), Size: uint32(placement.Size)})
	if err := check("CreateGpuInstanceWithPlacement", ret); err != nil {
		if errors.Is(err, gpu.ErrInsufficientResources) {
			return fail(fmt.Errorf("%w; slices %s are taken (%s); free placements of %s: %s",
				err, placement, describeOverlaps(g.Instances, *placement), profile, placementStarts(g.FreePlacements(p))))
		}
		return fail(err)
	}
	destroyGI := func(err error) (gpu.MIGDevice, error) {
		if derr := check("GpuInstance.Destroy", gi.Destroy()); derr != nil {
			err = errors.Join(err, fmt.Errorf("roll back GPU instance: %w", derr))
		}
		return fail(err)
	}
	ciInfo, err := fullComputeProfile(gi, p.Slices)
	if err != nil {
		return destroyGI(err)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if err := check("CreateComputeInstance", ret); err != nil {
		return destroyGI(err)
	}
	destroyAll := func(err error) (gpu.MIGDevice, error) {
		if derr := check("ComputeInstance.Destroy", ci.Destroy()); derr != nil {
			err = errors.Join(err, fmt.Errorf("roll back compute instance: %w", derr))
		}
		return destroyGI(err)
	}
	giInfo, ret := gi.GetInfo()
	if err := check("GpuInstance.GetInfo", ret); err != nil {
		return destroyAll(err)
	}
	cInfo, ret := ci.GetInfo()
	if err := check("ComputeInstance.GetInfo", ret); err != nil {
		return destroyAll(err)
	}
	uuids, err := migUUIDs(h)
	if err != nil {
		return destroyAll(err)
	}
	key := [2]int{int(giInfo.Id), int(cInfo.Id)}
	uuid, ok := uuids[key]
	if !ok {
		return destroyAll(fmt.Errorf("no MIG device handle for GI %d CI %d", key[0], key[1]))
	}
	m, err := d.migDevice(g, uuid, p.Name, *placement, key[0], key[1])
	if err != nil {
		return destroyAll(err)
	}
	return m, nil
}

// DestroyMIG implements gpu.MIG.
func (d *devices) DestroyMIG(ctx context.Context, gpuUUID, migUUID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	fail := func(err error) error {
		return fmt.Errorf("destroy MIG %s on GPU %s: %w", migUUID, gpuUUID, err)
	}
	if err := d.usable(ctx, "destroy MIG instance"); err != nil {
		return err
	}
	_, h, err := d.byUUID(gpuUUID)
	if err != nil {
		return fail(err)
	}
	uuids, err := migUUIDs(h)
	if err != nil {
		return fail(err)
	}
	var key [2]int
	found := false
	for k, u := range uuids {
		if u == migUUID {
			key, found = k, true
			break
		}
	}
	if !found {
		return fail(fmt.Errorf("the GPU has no such MIG instance: %w", gpu.ErrNotFound))
	}
	gi, ret := h.GetGpuInstanceById(key[0])
	if err := check(fmt.Sprintf("GetGpuInstanceById(%d)", key[0]), ret); err != nil {
		return fail(err)
	}
	ci, ret := gi.GetComputeInstanceById(key[1])
	if err := check(fmt.Sprintf("GetComputeInstanceById(%d)", key[1]), ret); err != nil {
		return fail(err)
	}
	if err := check("ComputeInstance.Destroy", ci.Destroy()); err != nil {
		if errors.Is(err, gpu.ErrInUse) {
			return fail(fmt.Errorf("%w; processes still run on it, stop them first", err))
		}
		return fail(err)
	}
	// A GPU instance with compute instances made outside gpud stays: NVML
	// refuses with IN_USE, which is not this call's failure.
	if err := check("GpuInstance.Destroy", gi.Destroy()); err != nil && !errors.Is(err, gpu.ErrInUse) {
		return fail(err)
	}
	return nil
}

// usable checks ctx and that d is open. Callers hold d.mu.
func (d *devices) usable(ctx context.Context, action string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if d.closed {
		return fmt.Errorf("%s on backend %q: already closed", action, d.backend)
	}
	return nil
}

// byUUID finds a GPU by walking the index, which behaves the same on every
// driver and mock (DeviceGetHandleByUUID's not-found code differs).
func (d *devices) byUUID(uuid string) (int, nvml.Device, error) {
	if d.lib == nil {
		return 0, nil, fmt.Errorf("no GPU %s on this node (it has none): %w", uuid, gpu.ErrNotFound)
	}
	n, ret := d.lib.DeviceGetCount()
	if err := check("DeviceGetCount", ret); err != nil {
		return 0, nil, err
	}
	for i := range n {
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if err := check(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret); err != nil {
			return 0, nil, err
		}
		u, ret := h.GetUUID()
		if err := check("GetUUID", ret); err != nil {
			return 0, nil, err
		}
		if u == uuid {
			return i, h, nil
		}
	}
	return 0, nil, fmt.Errorf("no GPU %s on this node: %w", uuid, gpu.ErrNotFound)
}

// migGPU reads one GPU's MIG view and, by profile id, the NVML profile
// infos CreateMIG needs.
func (d *devices) migGPU(index int, h nvml.Device) (gpu.MIGGPU, map[int]nvml.GpuInstanceProfileInfo, error) {
	g := gpu.MIGGPU{Index: index}
	var ret nvml.Return
	g.UUID, ret = h.GetUUID()
	if err := check("GetUUID", ret); err != nil {
		return g, nil, err
	}
	current, pending, ret := h.GetMigMode()
	if err := check("GetMigMode", ret); err != nil {
		if errors.Is(err, ErrNotSupported) {
			return g, nil, nil
		}
		return g, nil, err
	}
	g.Capable = true
	g.Mode = gpu.MIGMode{Current: current == nvml.DEVICE_MIG_ENABLE, Pending: pending == nvml.DEVICE_MIG_ENABLE}
	if !g.Mode.Current {
		return g, nil, nil
	}
	mem, ret := h.GetMemoryInfo()
	if err := check("GetMemoryInfo", ret); err != nil {
		return g, nil, err
	}
	infos := map[int]nvml.GpuInstanceProfileInfo{}
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := h.GetGpuInstanceProfileInfo(id)
		// Unknown ids (older drivers) and profiles this GPU lacks.
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := check(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", id), ret); err != nil {
			return g, nil, err
		}
		pls, ret := h.GetGpuInstancePossiblePlacements(&info)
		if err := check(fmt.Sprintf("GetGpuInstancePossiblePlacements(%d)", id), ret); err != nil {
			return g, nil, err
		}
		p := gpu.MIGProfile{
			Name:     MIGProfileName(int(info.Id), int(info.SliceCount), info.MemorySizeMB, mem.Total),
			ID:       int(info.Id),
			Slices:   int(info.SliceCount),
			MemMiB:   int64(info.MemorySizeMB),
			MaxCount: int(info.InstanceCount),
		}
		for _, pl := range pls {
			p.Placements = append(p.Placements, gpu.MIGPlacement{Start: int(pl.Start), Size: int(pl.Size)})
		}
		sort.Slice(p.Placements, func(i, j int) bool { return p.Placements[i].Start < p.Placements[j].Start })
		infos[int(info.Id)] = info
		g.Profiles = append(g.Profiles, p)
	}
	sort.SliceStable(g.Profiles, func(i, j int) bool {
		a, b := g.Profiles[i], g.Profiles[j]
		if a.Slices != b.Slices {
			return a.Slices < b.Slices
		}
		if a.MemMiB != b.MemMiB {
			return a.MemMiB < b.MemMiB
		}
		return a.ID < b.ID
	})
	insts, err := d.migInstances(g, h, infos)
	if err != nil {
		return g, nil, err
	}
	g.Instances = insts
	return g, infos, nil
}

// migInstances lists the GPU's instances, one per compute instance.
func (d *devices) migInstances(g gpu.MIGGPU, h nvml.Device, infos map[int]nvml.GpuInstanceProfileInfo) ([]gpu.MIGDevice, error) {
	uuids, err := migUUIDs(h)
	if err != nil {
		return nil, err
	}
	var out []gpu.MIGDevice
	for _, p := range g.Profiles {
		info := infos[p.ID]
		gis, ret := h.GetGpuInstances(&info)
		if err := check(fmt.Sprintf("GetGpuInstances(%s)", p.Name), ret); err != nil {
			return nil, err
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if err := check("GpuInstance.GetInfo", ret); err != nil {
				return nil, err
			}
			pl := gpu.MIGPlacement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)}
			cis, err := computeInstances(gi)
			if err != nil {
				return nil, fmt.Errorf("GPU instance %d: %w", giInfo.Id, err)
			}
			if len(cis) == 0 {
				// Left by an interrupted create outside gpud: it holds its
				// slices but cannot run anything.
				out = append(out, gpu.MIGDevice{
					ParentUUID: g.UUID, ParentIndex: g.Index, Profile: p.Name,
					Placement: pl, GI: int(giInfo.Id), CI: -1,
				})
				continue
			}
			for _, ci := range cis {
				name := p.Name
				if ci.slices != p.Slices {
					name = fmt.Sprintf("%dc.%s", ci.slices, p.Name)
				}
				key := [2]int{int(giInfo.Id), ci.id}
				m, err := d.migDevice(g, uuids[key], name, pl, key[0], key[1])
				if err != nil {
					return nil, err
				}
				out = append(out, m)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GI != out[j].GI {
			return out[i].GI < out[j].GI
		}
		return out[i].CI < out[j].CI
	})
	return out, nil
}

type ciRef struct{ id, slices int }

func computeInstances(gi nvml.GpuInstance) ([]ciRef, error) {
	var out []ciRef
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		prof, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := check(fmt.Sprintf("GetComputeInstanceProfileInfo(%d)", id), ret); err != nil {
			return nil, err
		}
		cis, ret := gi.GetComputeInstances(&prof)
		if err := check("GetComputeInstances", ret); err != nil {
			return nil, err
		}
		for _, ci := range cis {
			info, ret := ci.GetInfo()
			if err := check("ComputeInstance.GetInfo", ret); err != nil {
				return nil, err
			}
			out = append(out, ciRef{id: int(info.Id), slices: int(prof.SliceCount)})
		}
	}
	return out, nil
}

// fullComputeProfile finds the compute-instance profile spanning all of a
// GPU instance's slices.
func fullComputeProfile(gi nvml.GpuInstance, slices int) (nvml.ComputeInstanceProfileInfo, error) {
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		prof, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && int(prof.SliceCount) == slices {
			return prof, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, fmt.Errorf("no compute-instance profile spans %d slices", slices)
}

// migUUIDs maps (GI, CI) to MIG UUID through the MIG device handles.
func migUUIDs(h nvml.Device) (map[[2]int]string, error) {
	n, ret := h.GetMaxMigDeviceCount()
	if err := check("GetMaxMigDeviceCount", ret); err != nil {
		return nil, err
	}
	out := make(map[[2]int]string, n)
	for i := range n {
		m, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := check(fmt.Sprintf("GetMigDeviceHandleByIndex(%d)", i), ret); err != nil {
			return nil, err
		}
		gi, ret := m.GetGpuInstanceId()
		if err := check("GetGpuInstanceId", ret); err != nil {
			return nil, err
		}
		ci, ret := m.GetComputeInstanceId()
		if err := check("GetComputeInstanceId", ret); err != nil {
			return nil, err
		}
		uuid, ret := m.GetUUID()
		if err := check("MIG GetUUID", ret); err != nil {
			return nil, err
		}
		out[[2]int{gi, ci}] = uuid
	}
	return out, nil
}

// migDevice fills in the device nodes of one instance.
func (d *devices) migDevice(g gpu.MIGGPU, uuid, profile string, pl gpu.MIGPlacement, gi, ci int) (gpu.MIGDevice, error) {
	h, ret := d.lib.DeviceGetHandleByIndex(g.Index)
	if err := check("DeviceGetHandleByIndex", ret); err != nil {
		return gpu.MIGDevice{}, err
	}
	minor, ret := h.GetMinorNumber()
	if err := check("GetMinorNumber", ret); err != nil {
		return gpu.MIGDevice{}, err
	}
	giMinor, ciMinor, err := d.capMinors(minor, gi, ci)
	if err != nil {
		return gpu.MIGDevice{}, err
	}
	return gpu.MIGDevice{
		UUID: uuid, ParentUUID: g.UUID, ParentIndex: g.Index, ParentMinor: minor,
		Profile: profile, Placement: pl, GI: gi, CI: ci,
		GICapMinor: giMinor, CICapMinor: ciMinor,
		DeviceNodes: gpu.MIGDeviceNodes(minor, giMinor, ciMinor),
	}, nil
}

// capMinors reads the driver's mig-minors table where there is one (real
// GPUs) and otherwise uses the numbering it follows.
func (d *devices) capMinors(gpuMinor, gi, ci int) (int, int, error) {
	if d.migMinorsPath != "" {
		if tbl, err := readMIGMinors(d.migMinorsPath); err == nil {
			g, okG := tbl[fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi)]
			c, okC := tbl[fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)]
			if okG && okC {
				return g, c, nil
			}
		}
	}
	return gpu.MIGCapMinors(gpuMinor, gi, ci)
}

// readMIGMinors parses /proc/driver/nvidia-caps/mig-minors
// ("gpu0/gi1/ci0/access 13" per line).
func readMIGMinors(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, num, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(num)); err == nil {
			out[name] = n
		}
	}
	return out, sc.Err()
}

// MIGProfileName names a GPU-instance profile as nvidia-smi does:
// "<slices>g.<GB>gb" plus "+me", "-me", "+me.all" or "+gfx" for the media
// and graphics variants. GB is the profile's share of the GPU's memory,
// rounded to an eighth, times the GPU's memory in whole GB. go-nvlib rounds
// the share up instead; rounding to the nearest eighth gives the same name
// on real GPUs (whose shares sit just under k/8) and the documented names
// on the go-nvml mocks (whose H200 shares sit just over).
func MIGProfileName(profileID, slices int, memMiB, totalMemBytes uint64) string {
	totalMiB := float64(totalMemBytes) / (1 << 20)
	gb := float64(memMiB) / 1024
	if totalMiB > 0 {
		share := math.Max(1, math.Round(float64(memMiB)/totalMiB*8)) / 8
		gb = math.Round(share * math.Ceil(totalMiB/1024))
	}
	name := fmt.Sprintf("%dg.%dgb", slices, int(gb))
	switch profileID {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		name += "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	}
	return name
}

func placementStarts(pls []gpu.MIGPlacement) string {
	if len(pls) == 0 {
		return "none"
	}
	s := make([]string, len(pls))
	for i, p := range pls {
		s[i] = strconv.Itoa(p.Start)
	}
	return strings.Join(s, ", ")
}

func describeOverlaps(insts []gpu.MIGDevice, pl gpu.MIGPlacement) string {
	var s []string
	for _, m := range insts {
		if m.Placement.Overlaps(pl) {
			s = append(s, fmt.Sprintf("%s %s at %s", m.UUID, m.Profile, m.Placement))
		}
	}
	if len(s) == 0 {
		return "profile limit reached"
	}
	return "by " + strings.Join(s, ", ")
}
