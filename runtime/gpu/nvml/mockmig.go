package nvml

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Limits of the driver's MIG numbering (see gpu.MIGCapMinors).
const (
	mockMaxGIs = 15
	mockMaxCIs = 8
)

// mockMIG gives one go-nvml mock GPU the MIG behaviour of hardware. The
// go-nvml servers create instances without checking MIG mode, capacity or
// overlap, and panic on GetGpuInstanceRemainingCapacity,
// GetMigDeviceHandleByIndex and GetGpuInstanceById; installMockMIG replaces
// every MIG function of the device with ones backed by this state:
//
//   - MIG off: every instance and profile call returns NOT_SUPPORTED.
//   - A placement that is not among the profile's possible placements,
//     overlaps a live GPU instance, or exceeds the profile's instance count
//     returns INSUFFICIENT_RESOURCES; so does a compute instance larger than
//     what its GPU instance has left.
//   - Destroying a GPU instance that still has compute instances, a compute
//     instance with processes (setBusy), or MIG mode off while instances
//     exist returns IN_USE; a destroyed handle returns INVALID_ARGUMENT and
//     an unknown id NOT_FOUND.
//   - MIG device UUIDs are "MIG-" plus a UUID hashed from the GPU's UUID
//     (itself from the node seed), the profile, the placement and the CI id.
//
// One mutex guards a GPU's state, so the mock is safe for concurrent use.
type mockMIG struct {
	mu  sync.Mutex
	dev *server.Device
	// current and pending MIG mode; needsReset makes SetMigMode change
	// only pending until reset, as on GPUs that need a GPU reset.
	current, pending bool
	needsReset       bool
	gis              []*mockGI // sorted by id
	busy             map[string]bool
}

type mockGI struct {
	m         *mockMIG
	gi        *server.GpuInstance
	id        uint32
	profile   nvml.GpuInstanceProfileInfo
	placement nvml.GpuInstancePlacement
	cis       []*mockCI // sorted by id
	gone      bool
}

type mockCI struct {
	gi      *mockGI
	ci      *server.ComputeInstance
	id      uint32
	profile nvml.ComputeInstanceProfileInfo
	uuid    string
	handle  *mock.Device
	gone    bool
}

func installMockMIG(d *server.Device) *mockMIG {
	m := &mockMIG{dev: d, busy: map[string]bool{}}
	d.SetMigModeFunc = m.setMode
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return migInt(m.current), migInt(m.pending), nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.profileInfo(id)
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ret := m.profileInfo(int(info.Id)); ret != nvml.SUCCESS {
			return nil, ret
		}
		return append([]nvml.GpuInstancePlacement(nil), m.placements(info.Id)...), nvml.SUCCESS
	}
	d.GetGpuInstanceRemainingCapacityFunc = func(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		p, ret := m.profileInfo(int(info.Id))
		if ret != nvml.SUCCESS {
			return 0, ret
		}
		return m.remaining(p), nvml.SUCCESS
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		p, ret := m.profileInfo(int(info.Id))
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for _, pl := range m.placements(p.Id) {
			if m.fits(p, pl) == nvml.SUCCESS {
				return m.createGI(p, pl)
			}
		}
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		p, ret := m.profileInfo(int(info.Id))
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		if pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if ret := m.fits(p, *pl); ret != nvml.SUCCESS {
			return nil, ret
		}
		return m.createGI(p, *pl)
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ret := m.profileInfo(int(info.Id)); ret != nvml.SUCCESS {
			return nil, ret
		}
		var out []nvml.GpuInstance
		for _, g := range m.gis {
			if g.profile.Id == info.Id {
				out = append(out, g.gi)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.current {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		for _, g := range m.gis {
			if int(g.id) == id {
				return g.gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		return mockMaxCIs - 1, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.current {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		if i < 0 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		for _, g := range m.gis {
			if i < len(g.cis) {
				return g.cis[i].handle, nvml.SUCCESS
			}
			i -= len(g.cis)
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	return m
}

func migInt(on bool) int {
	if on {
		return nvml.DEVICE_MIG_ENABLE
	}
	return nvml.DEVICE_MIG_DISABLE
}

func (m *mockMIG) setMode(mode int) (nvml.Return, nvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	on := mode == nvml.DEVICE_MIG_ENABLE
	if !on && len(m.gis) > 0 {
		return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
	}
	m.pending = on
	if m.needsReset {
		return nvml.ERROR_RESET_REQUIRED, nvml.SUCCESS
	}
	m.current = on
	return nvml.SUCCESS, nvml.SUCCESS
}

// reset applies a pending MIG mode, as a GPU reset does.
func (m *mockMIG) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.current = m.pending
}

// setBusy marks the MIG device uuid as running processes (or not).
func (m *mockMIG) setBusy(uuid string, busy bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.busy[uuid] = busy
}

func (m *mockMIG) profileInfo(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if !m.current {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	if id < 0 || id >= nvml.GPU_INSTANCE_PROFILE_COUNT {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := m.dev.Config.MIGProfiles.GpuInstanceProfiles[id]
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return p, nvml.SUCCESS
}

func (m *mockMIG) placements(id uint32) []nvml.GpuInstancePlacement {
	return m.dev.Config.MIGProfiles.GpuInstancePlacements[int(id)]
}

func overlaps(a, b nvml.GpuInstancePlacement) bool {
	return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size
}

// fits checks that a new instance of p may take pl.
func (m *mockMIG) fits(p nvml.GpuInstanceProfileInfo, pl nvml.GpuInstancePlacement) nvml.Return {
	possible := false
	for _, q := range m.placements(p.Id) {
		if q == pl {
			possible = true
			break
		}
	}
	if !possible {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	n := 0
	for _, g := range m.gis {
		if overlaps(g.placement, pl) {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		if g.profile.Id == p.Id {
			n++
		}
	}
	if n >= int(p.InstanceCount) {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return nvml.SUCCESS
}

// remaining counts how many more instances of p fit: free placements taken
// greedily by start (optimal, since they all have one size), capped by the
// profile's instance count.
func (m *mockMIG) remaining(p nvml.GpuInstanceProfileInfo) int {
	n := 0
	for _, g := range m.gis {
		if g.profile.Id == p.Id {
			n++
		}
	}
	left := int(p.InstanceCount) - n
	pls := append([]nvml.GpuInstancePlacement(nil), m.placements(p.Id)...)
	sort.Slice(pls, func(i, j int) bool { return pls[i].Start < pls[j].Start })
	count, end := 0, uint32(0)
next:
	for _, pl := range pls {
		if count >= left {
			break
		}
		if count > 0 && pl.Start < end {
			continue
		}
		for _, g := range m.gis {
			if overlaps(g.placement, pl) {
				continue next
			}
		}
		count++
		end = pl.Start + pl.Size
	}
	return count
}

func (m *mockMIG) createGI(p nvml.GpuInstanceProfileInfo, pl nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	id, ok := lowestFreeID(mockMaxGIs, func(id uint32) bool {
		for _, g := range m.gis {
			if g.id == id {
				return true
			}
		}
		return false
	})
	if !ok {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	g := &mockGI{m: m, id: id, profile: p, placement: pl}
	g.gi = server.NewGpuInstanceFromInfo(nvml.GpuInstanceInfo{
		Device: m.dev, Id: id, ProfileId: p.Id, Placement: pl,
	}, m.dev.Config.MIGProfiles)
	g.install()
	m.gis = append(m.gis, g)
	sort.Slice(m.gis, func(i, j int) bool { return m.gis[i].id < m.gis[j].id })
	return g.gi, nvml.SUCCESS
}

func lowestFreeID(limit uint32, used func(uint32) bool) (uint32, bool) {
	for id := range limit {
		if !used(id) {
			return id, true
		}
	}
	return 0, false
}

func (g *mockGI) install() {
	m := g.m
	getInfo := g.gi.GetInfoFunc
	g.gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if g.gone {
			return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return getInfo()
	}
	g.gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return g.createCI(info)
	}
	g.gi.CreateComputeInstanceWithPlacementFunc = func(info *nvml.ComputeInstanceProfileInfo, _ *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return g.createCI(info)
	}
	g.gi.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if g.gone {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		var out []nvml.ComputeInstance
		for _, c := range g.cis {
			if c.profile.Id == info.Id {
				out = append(out, c.ci)
			}
		}
		return out, nvml.SUCCESS
	}
	g.gi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if g.gone {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		for _, c := range g.cis {
			if int(c.id) == id {
				return c.ci, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	g.gi.GetComputeInstanceRemainingCapacityFunc = func(info *nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if g.gone {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if info.SliceCount == 0 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return int(g.freeSlices() / info.SliceCount), nvml.SUCCESS
	}
	g.gi.DestroyFunc = func() nvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		if g.gone {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if len(g.cis) > 0 {
			return nvml.ERROR_IN_USE
		}
		g.gone = true
		for i, o := range m.gis {
			if o == g {
				m.gis = append(m.gis[:i], m.gis[i+1:]...)
				break
			}
		}
		return nvml.SUCCESS
	}
}

func (g *mockGI) freeSlices() uint32 {
	used := uint32(0)
	for _, c := range g.cis {
		used += c.profile.SliceCount
	}
	return g.profile.SliceCount - used
}

func (g *mockGI) createCI(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	if g.gone {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	known, ok := g.m.dev.Config.MIGProfiles.ComputeInstanceProfiles[int(g.profile.Id)][int(info.Id)]
	if !ok || known.SliceCount != info.SliceCount {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if info.SliceCount > g.freeSlices() {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	id, ok := lowestFreeID(mockMaxCIs, func(id uint32) bool {
		for _, c := range g.cis {
			if c.id == id {
				return true
			}
		}
		return false
	})
	if !ok {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	c := &mockCI{gi: g, id: id, profile: *info}
	c.uuid = mockMIGUUID(g.m.dev.UUID, g.profile.Id, g.placement, id)
	c.ci = server.NewComputeInstanceFromInfo(nvml.ComputeInstanceInfo{
		Device: g.m.dev, GpuInstance: g.gi, Id: id, ProfileId: info.Id,
	})
	c.install()
	g.cis = append(g.cis, c)
	sort.Slice(g.cis, func(i, j int) bool { return g.cis[i].id < g.cis[j].id })
	return c.ci, nvml.SUCCESS
}

func (c *mockCI) install() {
	g, m := c.gi, c.gi.m
	getInfo := c.ci.GetInfoFunc
	c.ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c.gone {
			return nvml.ComputeInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return getInfo()
	}
	c.ci.DestroyFunc = func() nvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c.gone {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if m.busy[c.uuid] {
			return nvml.ERROR_IN_USE
		}
		c.gone = true
		for i, o := range g.cis {
			if o == c {
				g.cis = append(g.cis[:i], g.cis[i+1:]...)
				break
			}
		}
		return nvml.SUCCESS
	}
	parent := m.dev
	name := fmt.Sprintf("%s MIG %dg", parent.Config.Name, g.profile.SliceCount)
	memBytes := g.profile.MemorySizeMB << 20
	c.handle = &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return c.uuid, nvml.SUCCESS },
		GetNameFunc:              func() (string, nvml.Return) { return name, nvml.SUCCESS },
		IsMigDeviceHandleFunc:    func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return int(g.id), nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return int(c.id), nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) {
			return parent, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: memBytes, Free: memBytes}, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if !m.busy[c.uuid] {
				return nil, nvml.SUCCESS
			}
			return []nvml.ProcessInfo{{Pid: 4242, GpuInstanceId: g.id, ComputeInstanceId: c.id}}, nvml.SUCCESS
		},
	}
}

// mockMIGUUID derives a MIG device UUID from the parent GPU's UUID (which
// the node seed determines), the profile, placement and CI id: the same
// instance made again on the same node gets the same UUID.
func mockMIGUUID(gpuUUID string, profileID uint32, pl nvml.GpuInstancePlacement, ci uint32) string {
	key := gpuUUID + "\x00" + strconv.Itoa(int(profileID)) + "\x00" + strconv.Itoa(int(pl.Start)) +
		"+" + strconv.Itoa(int(pl.Size)) + "\x00" + strconv.Itoa(int(ci))
	sum := sha256.Sum256([]byte(key))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
