package nvml

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/gpud/gpud/runtime/gpu"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func inventory(t *testing.T, backend string, opts ...Option) []gpu.Device {
	t.Helper()
	d, err := Open(context.Background(), backend, opts...)
	if err != nil {
		t.Fatalf("Open(%q): %v", backend, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	devs, err := d.Inventory(context.Background())
	if err != nil {
		t.Fatalf("Inventory(%q): %v", backend, err)
	}
	return devs
}

func dgxBus(buses ...string) []string {
	out := make([]string, len(buses))
	for i, b := range buses {
		out[i] = "0000:" + b + ":00.0"
	}
	return out
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestMockBackends(t *testing.T) {
	tests := []struct {
		backend  string
		wantName string
		wantMod  string
		wantMem  int64
		wantBus  []string
	}{
		{BackendDGXA100, "Mock NVIDIA A100-SXM4-40GB", "a100", 40960, dgxBus("07", "0f", "47", "4e", "87", "90", "b7", "bd")},
		{BackendDGXH100, "NVIDIA H100 80GB HBM3", "h100", 81920, dgxBus("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")},
		{BackendDGXH200, "NVIDIA H200 141GB HBM3e", "h200", 144384, dgxBus("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")},
	}
	for _, tc := range tests {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			devs := inventory(t, tc.backend, WithMockSeed("node-a"))
			if len(devs) != 8 {
				t.Fatalf("got %d GPUs, want 8", len(devs))
			}
			var uuids []string
			for _, d := range devs {
				uuids = append(uuids, d.UUID)
			}
			for i, d := range devs {
				if !uuidRE.MatchString(d.UUID) {
					t.Errorf("GPU %d UUID %q is not NVML-shaped", i, d.UUID)
				}
				var peers []string
				for j, u := range uuids {
					if j != i {
						peers = append(peers, u)
					}
				}
				want := gpu.Device{
					Index: i, UUID: d.UUID, Name: tc.wantName, Model: tc.wantMod, MemMiB: tc.wantMem,
					PCIBusID: tc.wantBus[i], NUMANode: i / 4, Minor: i,
					NVLinkPeers: peers, Serial: mockSerial(d.UUID),
				}
				if !regexp.MustCompile(`^1654[0-9]{9}$`).MatchString(d.Serial) {
					t.Errorf("GPU %d serial %q is not a 13-digit board serial", i, d.Serial)
				}
				if diff := cmp.Diff(want, d); diff != "" {
					t.Errorf("GPU %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestMockUUIDsDeterministic(t *testing.T) {
	uuids := func(backend, seed string) []string {
		var out []string
		for _, d := range inventory(t, backend, WithMockSeed(seed)) {
			out = append(out, d.UUID)
		}
		return out
	}
	a1 := uuids(BackendDGXH100, "node-a")
	a2 := uuids(BackendDGXH100, "node-a")
	if diff := cmp.Diff(a1, a2); diff != "" {
		t.Errorf("same seed, different UUIDs (-first +second):\n%s", diff)
	}
	seen := map[string]string{}
	for _, run := range []struct{ backend, seed string }{
		{BackendDGXH100, "node-a"}, {BackendDGXH100, "node-b"}, {BackendDGXH200, "node-a"},
	} {
		for _, u := range uuids(run.backend, run.seed) {
			if prev, dup := seen[u]; dup {
				t.Errorf("UUID %s of %v repeats one of %s", u, run, prev)
			}
			seen[u] = run.backend + "/" + run.seed
		}
	}
	// Without a seed go-nvml's random UUIDs remain.
	if diff := cmp.Diff(uuids(BackendDGXH100, ""), uuids(BackendDGXH100, "")); diff == "" {
		t.Error("unseeded mock UUIDs repeat across Opens; want random")
	}
}

func TestNoneBackend(t *testing.T) {
	devs := inventory(t, BackendNone)
	if devs == nil || len(devs) != 0 {
		t.Errorf("none backend gave %#v, want an empty non-nil list", devs)
	}
}

func TestUnknownBackend(t *testing.T) {
	_, err := Open(context.Background(), "mock:dgx-z900")
	if err == nil {
		t.Fatal("Open accepted an unknown backend")
	}
	for _, b := range Backends {
		if !strings.Contains(err.Error(), b) {
			t.Errorf("error %q does not list allowed backend %q", err, b)
		}
	}
}

func TestClosedInventory(t *testing.T) {
	d, err := Open(context.Background(), BackendDGXH100)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := d.Inventory(context.Background()); err == nil {
		t.Error("Inventory after Close succeeded")
	}
}

func TestInventoryHonoursContext(t *testing.T) {
	d, err := Open(context.Background(), BackendDGXH100)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Inventory(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Inventory with cancelled ctx = %v, want context.Canceled", err)
	}
}

// The real backends must fail cleanly, not abort, where there is no
// driver; where there is one, GPUD_TEST_GPU=1 runs the real walk.
func TestRealBackend(t *testing.T) {
	for _, backend := range []string{BackendNVML, BackendAuto} {
		t.Run(backend, func(t *testing.T) {
			d, err := Open(context.Background(), backend)
			if err != nil {
				if !errors.Is(err, ErrNoDriver) {
					t.Fatalf("Open(%q) = %v, want ErrNoDriver", backend, err)
				}
				for _, hint := range []string{"--gpus=mock:dgx-h100", "--gpus=none"} {
					if !strings.Contains(err.Error(), hint) {
						t.Errorf("error %q lacks hint %s", err, hint)
					}
				}
				if os.Getenv("GPUD_TEST_GPU") == "1" {
					t.Fatalf("GPUD_TEST_GPU=1 but no driver: %v", err)
				}
				t.Logf("no NVIDIA driver here, as expected off GPU hosts: %v", err)
				return
			}
			defer func() {
				if err := d.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			devs, err := d.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) == 0 {
				t.Fatal("real NVML reports no GPUs")
			}
			for _, g := range devs {
				t.Logf("GPU %+v", g)
				if !strings.HasPrefix(g.UUID, "GPU-") || g.MemMiB <= 0 || g.Model == "" || g.Model == "unknown" {
					t.Errorf("implausible real GPU %+v", g)
				}
			}
			samples, err := d.(gpu.Sampler).Sample(context.Background())
			if err != nil || len(samples) != len(devs) {
				t.Fatalf("Sample = %d samples, %v; want %d", len(samples), err, len(devs))
			}
			for i, s := range samples {
				t.Logf("sample %+v", s)
				// Memory and temperature are read on every datacenter GPU.
				if s.UUID != devs[i].UUID || !s.HasMem || !s.HasTemp || s.TempC <= 0 || s.MemUsedMiB > float64(devs[i].MemMiB) ||
					s.HasUtil && s.UtilPct > 100 || s.HasPower && s.PowerW <= 0 {
					t.Errorf("implausible real sample %+v of %+v", s, devs[i])
				}
			}
		})
	}
}

func TestWithLibraryPathMissing(t *testing.T) {
	_, err := Open(context.Background(), BackendNVML, WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open with missing library = %v, want ErrNoDriver", err)
	}
}

func TestModelName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"NVIDIA H100 80GB HBM3", "h100"},
		{"NVIDIA H100 PCIe", "h100"},
		{"NVIDIA A100-SXM4-40GB", "a100"},
		{"Mock NVIDIA A100-SXM4-40GB", "a100"},
		{"NVIDIA A100 80GB PCIe", "a100"},
		{"NVIDIA H200 141GB HBM3e", "h200"},
		{"NVIDIA B200 180GB HBM3e", "b200"},
		{"NVIDIA GH200 480GB", "gh200"},
		{"NVIDIA L40S", "l40s"},
		{"Tesla V100-SXM2-32GB", "v100"},
		{"NVIDIA GeForce RTX 4090", "rtx4090"},
		{"NVIDIA RTX A6000", "rtxa6000"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtxpro6000"},
		{"", "unknown"},
	}
	for _, tc := range tests {
		if got := ModelName(tc.name); got != tc.want {
			t.Errorf("ModelName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestNormalizeBusID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"00000000:18:00.0", "0000:18:00.0"},
		{"0000:AB:00.0", "0000:ab:00.0"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := normalizeBusID(tc.in); got != tc.want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSysfsNUMANode(t *testing.T) {
	root := t.TempDir()
	dir := root + "/bus/pci/devices/0000:18:00.0"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/numa_node", []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := sysfsNUMANode(root, "0000:18:00.0"); got != 1 {
		t.Errorf("numa = %d, want 1", got)
	}
	if got := sysfsNUMANode(root, "0000:19:00.0"); got != -1 {
		t.Errorf("numa of missing device = %d, want -1", got)
	}
}

// An unmodified go-nvml mock implements neither NUMA nor P2P queries and
// panics if asked; the walk must skip them and treat NOT_SUPPORTED as
// unknown, but fail on a broken required attribute.
func TestWalkGuardsUnsupportedCalls(t *testing.T) {
	s := dgxh100.New()
	s.Devices[0].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	d := &devices{backend: "test", lib: s, supports: mockSupports}
	devs, err := d.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range devs {
		if g.NUMANode != -1 || g.NVLinkPeers != nil || g.MIGEnabled {
			t.Errorf("GPU %d: NUMA %d peers %v MIG %v, want unknown (-1, none, false)", i, g.NUMANode, g.NVLinkPeers, g.MIGEnabled)
		}
	}

	s.Devices[1].(*server.Device).SetMigMode(nvml.DEVICE_MIG_ENABLE)
	devs, err = d.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !devs[1].MIGEnabled || devs[2].MIGEnabled {
		t.Errorf("MIG enabled = %v/%v, want true/false", devs[1].MIGEnabled, devs[2].MIGEnabled)
	}

	s.Devices[1].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
	}
	_, err = d.Inventory(context.Background())
	if err == nil || !strings.Contains(err.Error(), "GPU 1: nvml GetMemoryInfo: GPU is lost") {
		t.Errorf("Inventory with a lost GPU = %v, want it to name GPU 1 and GetMemoryInfo", err)
	}
}
