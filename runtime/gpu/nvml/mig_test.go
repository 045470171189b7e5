package nvml

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/runtime/gpu"
)

const backendA100x80 = "test:a100-80gb"

// openMIG opens a mock backend (or an A100-80GB server, which go-nvml
// has but Open does not offer) and returns it with GPU 0 in MIG mode.
func openMIG(t testing.TB, backend string) (*devices, gpu.MIGGPU) {
	t.Helper()
	var d *devices
	if backend == backendA100x80 {
		d = openMock(backend, dgxa100.NewWithGPUs(gpus.Multiple(8, gpus.A100_SXM4_80GB)...), options{mockSeed: "node-a"})
	} else {
		g, err := Open(context.Background(), backend, WithMockSeed("node-a"))
		if err != nil {
			t.Fatal(err)
		}
		d = g.(*devices)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	st, err := d.MIGState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(ctx, st[0].UUID, true); err != nil {
		t.Fatal(err)
	}
	st, err = d.MIGState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d, st[0]
}

func profileNames(ps []gpu.MIGProfile) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestMIGProfilesPerModel(t *testing.T) {
	tests := []struct {
		backend string
		want    []string
	}{
		{BackendDGXA100, []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
		{backendA100x80, []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{BackendDGXH100, []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{BackendDGXH200, []string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
	}
	for _, tc := range tests {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			_, g := openMIG(t, tc.backend)
			if diff := cmp.Diff(tc.want, profileNames(g.Profiles)); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
			for _, p := range g.Profiles {
				if len(p.Placements) == 0 || p.MaxCount < 1 || p.MemMiB <= 0 {
					t.Errorf("profile %+v lacks placements, count or memory", p)
				}
			}
			if !g.Capable || g.Mode != (gpu.MIGMode{Current: true, Pending: true}) || len(g.Instances) != 0 {
				t.Errorf("GPU 0 = capable %v mode %+v instances %v, want MIG on and empty", g.Capable, g.Mode, g.Instances)
			}
		})
	}
}

// A profile one model offers and another lacks is refused with the list
// of what this GPU offers.
func TestCreateMIGValidatesProfilePerDevice(t *testing.T) {
	tests := []struct {
		backend, profile string
		wantErr          error
		wantList         string
	}{
		{BackendDGXH100, "3g.40gb", nil, ""},
		{BackendDGXA100, "3g.40gb", gpu.ErrUnknownProfile, "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"},
		{BackendDGXA100, "1g.20gb", gpu.ErrUnknownProfile, "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"},
		{backendA100x80, "1g.20gb", nil, ""},
		{backendA100x80, "1g.5gb", gpu.ErrUnknownProfile, "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"},
		{BackendDGXH100, "1g.10gb", nil, ""},
		{BackendDGXH100, "1g.18gb", gpu.ErrUnknownProfile, "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"},
		{BackendDGXH200, "1g.18gb", nil, ""},
		{BackendDGXH200, "3g.40gb", gpu.ErrUnknownProfile, "1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"},
	}
	for _, tc := range tests {
		t.Run(tc.backend+"/"+tc.profile, func(t *testing.T) {
			t.Parallel()
			d, g := openMIG(t, tc.backend)
			m, err := d.CreateMIG(context.Background(), g.UUID, tc.profile, 0)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("CreateMIG(%s) = %v", tc.profile, err)
				}
				if m.Profile != tc.profile {
					t.Errorf("profile %q, want %q", m.Profile, tc.profile)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("CreateMIG(%s) = %v, want %v", tc.profile, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "(offers "+tc.wantList+")") {
				t.Errorf("error %q does not list the GPU's profiles %s", err, tc.wantList)
			}
		})
	}
}

var migUUIDRE = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestCreateDestroyMIG(t *testing.T) {
	ctx := context.Background()
	d, g := openMIG(t, BackendDGXH100)

	// Seven 1g.10gb slices fill the GPU.
	var made []gpu.MIGDevice
	seen := map[string]bool{}
	for start := range 7 {
		m, err := d.CreateMIG(ctx, g.UUID, "1g.10gb", start)
		if err != nil {
			t.Fatalf("slice %d: %v", start, err)
		}
		if !migUUIDRE.MatchString(m.UUID) || seen[m.UUID] {
			t.Errorf("slice %d UUID %q malformed or repeated", start, m.UUID)
		}
		seen[m.UUID] = true
		giMinor, ciMinor, err := gpu.MIGCapMinors(0, m.GI, m.CI)
		if err != nil {
			t.Fatal(err)
		}
		want := gpu.MIGDevice{
			UUID: m.UUID, ParentUUID: g.UUID, ParentIndex: 0, ParentMinor: 0,
			Profile: "1g.10gb", Placement: gpu.MIGPlacement{Start: start, Size: 1},
			GI: start, CI: 0, GICapMinor: giMinor, CICapMinor: ciMinor,
			DeviceNodes: []string{"/dev/nvidia0", fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giMinor), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ciMinor)},
		}
		if diff := cmp.Diff(want, m); diff != "" {
			t.Errorf("slice %d (-want +got):\n%s", start, diff)
		}
		made = append(made, m)
	}
	_, err := d.CreateMIG(ctx, g.UUID, "1g.10gb", 3)
	if !errors.Is(err, gpu.ErrInsufficientResources) || !strings.Contains(err.Error(), made[3].UUID) {
		t.Errorf("8th slice = %v, want insufficient resources naming %s", err, made[3].UUID)
	}

	st, err := d.MIGState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(made, st[0].Instances); diff != "" {
		t.Errorf("MIGState instances (-created +listed):\n%s", diff)
	}
	if len(st[1].Instances) != 0 || st[1].Mode.Current {
		t.Errorf("GPU 1 = %+v, want MIG off and untouched", st[1])
	}

	// MIG mode cannot go off under instances.
	if err := d.SetMIGMode(ctx, g.UUID, false); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("SetMIGMode(off) with instances = %v, want ErrInUse", err)
	}
	// A slice with processes cannot be destroyed.
	d.mockMIGs[0].setBusy(made[2].UUID, true)
	if err := d.DestroyMIG(ctx, g.UUID, made[2].UUID); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("DestroyMIG(busy) = %v, want ErrInUse", err)
	}
	d.mockMIGs[0].setBusy(made[2].UUID, false)
	for _, m := range made {
		if err := d.DestroyMIG(ctx, g.UUID, m.UUID); err != nil {
			t.Fatalf("DestroyMIG(%s): %v", m.UUID, err)
		}
	}
	if err := d.DestroyMIG(ctx, g.UUID, made[0].UUID); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("second DestroyMIG = %v, want ErrNotFound", err)
	}
	if err := d.DestroyMIG(ctx, "GPU-nope", made[0].UUID); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("DestroyMIG on unknown GPU = %v, want ErrNotFound", err)
	}

	// Same node seed, same placement: same UUID, also after a restart.
	again, err := d.CreateMIG(ctx, g.UUID, "1g.10gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if again.UUID != made[4].UUID {
		t.Errorf("recreated slice UUID %s, want %s", again.UUID, made[4].UUID)
	}
	d2, g2 := openMIG(t, BackendDGXH100)
	m2, err := d2.CreateMIG(ctx, g2.UUID, "1g.10gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if m2.UUID != made[4].UUID {
		t.Errorf("slice on reopened node has UUID %s, want %s", m2.UUID, made[4].UUID)
	}
	if err := d.DestroyMIG(ctx, g.UUID, again.UUID); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMIGMode(ctx, g.UUID, false); err != nil {
		t.Errorf("SetMIGMode(off) on empty GPU: %v", err)
	}
}

// 3g.40gb then 4g.40gb: only non-overlapping placements succeed.
func TestCreateMIGPlacementOverlap(t *testing.T) {
	ctx := context.Background()
	d, g := openMIG(t, BackendDGXH100)
	if _, err := d.CreateMIG(ctx, g.UUID, "3g.40gb", 0); err != nil {
		t.Fatal(err)
	}
	_, err := d.CreateMIG(ctx, g.UUID, "4g.40gb", 0)
	if !errors.Is(err, gpu.ErrInsufficientResources) {
		t.Fatalf("4g.40gb over 3g.40gb = %v, want ErrInsufficientResources", err)
	}
	if !strings.Contains(err.Error(), "free placements of 4g.40gb: none") {
		t.Errorf("error %q does not say 4g.40gb has no free placement", err)
	}
	_, err = d.CreateMIG(ctx, g.UUID, "3g.40gb", 2)
	if !errors.Is(err, gpu.ErrInsufficientResources) || !strings.Contains(err.Error(), "starts: 0, 4") {
		t.Errorf("3g.40gb at a start it lacks = %v, want ErrInsufficientResources listing starts 0, 4", err)
	}
	if _, err := d.CreateMIG(ctx, g.UUID, "3g.40gb", 4); err != nil {
		t.Errorf("second 3g.40gb at 4: %v", err)
	}
}

func TestCreateMIGNeedsMIGMode(t *testing.T) {
	ctx := context.Background()
	d, _ := openMIG(t, BackendDGXH100)
	st, err := d.MIGState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g1 := st[1]
	if !g1.Capable || g1.Mode.Current || len(g1.Profiles) != 0 {
		t.Fatalf("GPU 1 = %+v, want MIG capable, off, no profiles", g1)
	}
	if _, err := d.CreateMIG(ctx, g1.UUID, "1g.10gb", 0); !errors.Is(err, gpu.ErrMIGDisabled) {
		t.Errorf("CreateMIG with MIG off = %v, want ErrMIGDisabled", err)
	}

	// A GPU that needs a reset shows the switch as pending.
	d.mockMIGs[1].needsReset = true
	if err := d.SetMIGMode(ctx, g1.UUID, true); err != nil {
		t.Fatal(err)
	}
	st, _ = d.MIGState(ctx)
	if st[1].Mode != (gpu.MIGMode{Current: false, Pending: true}) {
		t.Errorf("mode after switch needing reset = %+v, want pending on", st[1].Mode)
	}
	d.mockMIGs[1].reset()
	st, _ = d.MIGState(ctx)
	if st[1].Mode != (gpu.MIGMode{Current: true, Pending: true}) || len(st[1].Profiles) == 0 {
		t.Errorf("after reset mode %+v with %d profiles, want on with profiles", st[1].Mode, len(st[1].Profiles))
	}
}

// The mock behaves like hardware at the nvml.Interface level, where the
// go-nvml server accepts anything or panics.
func TestMockMIGAtNVMLLevel(t *testing.T) {
	d, _ := openMIG(t, BackendDGXH100)
	s := d.lib.(*server.Server)
	off := s.Devices[1]
	if _, ret := off.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("profile info with MIG off = %v, want NOT_SUPPORTED", ret)
	}
	if _, ret := off.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG handle with MIG off = %v, want NOT_SUPPORTED", ret)
	}
	if _, ret := off.GetGpuInstanceById(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GI by id with MIG off = %v, want NOT_SUPPORTED", ret)
	}

	h := s.Devices[0]
	info3, _ := h.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	info1, _ := h.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if n, ret := h.GetGpuInstanceRemainingCapacity(&info3); ret != nvml.SUCCESS || n != 2 {
		t.Errorf("3g capacity on empty GPU = %d, %v; want 2", n, ret)
	}
	gi, ret := h.CreateGpuInstanceWithPlacement(&info3, &nvml.GpuInstancePlacement{Start: 0, Size: 3})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for _, tc := range []struct {
		name string
		info *nvml.GpuInstanceProfileInfo
		pl   nvml.GpuInstancePlacement
	}{
		{"overlap", &info1, nvml.GpuInstancePlacement{Start: 2, Size: 1}},
		{"same", &info3, nvml.GpuInstancePlacement{Start: 0, Size: 3}},
		{"no such placement", &info3, nvml.GpuInstancePlacement{Start: 1, Size: 3}},
	} {
		if _, ret := h.CreateGpuInstanceWithPlacement(tc.info, &tc.pl); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
			t.Errorf("%s: create = %v, want INSUFFICIENT_RESOURCES", tc.name, ret)
		}
	}
	if n, _ := h.GetGpuInstanceRemainingCapacity(&info3); n != 1 {
		t.Errorf("3g capacity with one 3g = %d, want 1", n)
	}
	if n, _ := h.GetGpuInstanceRemainingCapacity(&info1); n != 4 {
		t.Errorf("1g capacity beside one 3g at 0 = %d, want 4", n)
	}
	if got, ret := h.GetGpuInstanceById(0); ret != nvml.SUCCESS || got != gi {
		t.Errorf("GI by id = %v, %v", got, ret)
	}
	if _, ret := h.GetGpuInstanceById(5); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("unknown GI by id = %v, want NOT_FOUND", ret)
	}
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("second full CI = %v, want INSUFFICIENT_RESOURCES", ret)
	}
	mig, ret := h.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := h.GetMigDeviceHandleByIndex(1); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("second MIG handle = %v, want NOT_FOUND", ret)
	}
	if parent, _ := mig.GetDeviceHandleFromMigDeviceHandle(); parent != h {
		t.Error("MIG handle's parent is not the GPU")
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroy GI with a CI = %v, want IN_USE", ret)
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := ci.Destroy(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("destroy CI twice = %v, want INVALID_ARGUMENT", ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if n, _ := h.GetGpuInstanceRemainingCapacity(&info1); n != 7 {
		t.Errorf("1g capacity after destroy = %d, want 7", n)
	}
}

func TestMIGProfileName(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		id, slices int
		mem, total uint64
		want       string
	}{
		// Real drivers: shares just under k/8.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 4864, 40536 << 20, "1g.5gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 80896, 81559 << 20, "7g.80gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 9856, 81559 << 20, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, 1, 9856, 81559 << 20, "1g.10gb+gfx"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, 9856, 81559 << 20, "1g.10gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, 2, 19968, 81559 << 20, "2g.20gb+me.all"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 16384, 143771 << 20, "1g.18gb"},
		// Unknown total: plain GB.
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, 20480, 0, "2g.20gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 144384, 141 * gib, "7g.141gb"},
	}
	for _, tc := range tests {
		if got := MIGProfileName(tc.id, tc.slices, tc.mem, tc.total); got != tc.want {
			t.Errorf("MIGProfileName(%d, %d, %d, %d) = %q, want %q", tc.id, tc.slices, tc.mem, tc.total, got, tc.want)
		}
	}
}

func TestNoneBackendMIG(t *testing.T) {
	g, err := Open(context.Background(), BackendNone)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m := g.(gpu.MIG)
	st, err := m.MIGState(context.Background())
	if err != nil || len(st) != 0 {
		t.Errorf("MIGState = %v, %v; want empty", st, err)
	}
	if _, err := m.CreateMIG(context.Background(), "GPU-x", "1g.10gb", 0); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("CreateMIG on a GPU-less node = %v, want ErrNotFound", err)
	}
}

// BenchmarkMIGPlanCycle enumerates every placement of every profile on
// eight GPUs, then creates and destroys seven 1g slices per GPU: the work
// a mock node does per dynamic-MIG cycle in `gpud standalone`.
func BenchmarkMIGPlanCycle(b *testing.B) {
	ctx := context.Background()
	d, _ := openMIG(b, BackendDGXH100)
	st, err := d.MIGState(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range st[1:] {
		if err := d.SetMIGMode(ctx, g.UUID, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		st, err := d.MIGState(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, g := range st {
			for _, p := range g.Profiles {
				n += len(g.FreePlacements(p))
			}
		}
		if n == 0 {
			b.Fatal("no placements")
		}
		for _, g := range st {
			var made []string
			for start := range 7 {
				m, err := d.CreateMIG(ctx, g.UUID, "1g.10gb", start)
				if err != nil {
					b.Fatal(err)
				}
				made = append(made, m.UUID)
			}
			for _, u := range made {
				if err := d.DestroyMIG(ctx, g.UUID, u); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// With a real driver, MIGState must read without error (read-only: the
// test never changes a GPU's MIG mode).
func TestRealMIGState(t *testing.T) {
	g, err := Open(context.Background(), BackendNVML)
	if err != nil {
		if errors.Is(err, ErrNoDriver) {
			t.Skipf("SKIP: no NVIDIA driver: %v", err)
		}
		t.Fatal(err)
	}
	defer g.Close()
	st, err := g.(gpu.MIG).MIGState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		t.Logf("GPU %d %s capable %v mode %+v profiles %s instances %d", s.Index, s.UUID, s.Capable, s.Mode, gpu.ProfileNames(s.Profiles), len(s.Instances))
	}
}
