package rdma

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"go.uber.org/goleak"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The mock DGX H100's GPUs (runtime/gpu/nvml.MockPCIBusID): buses 18, 2a,
// 3a, 5d on NUMA node 0 and 9a, ab, ba, db on node 1. Four NICs, two per
// NUMA node, each under the PCIe switch of GPU 0, 2, 4 and 6; GPUs 1, 5
// have a switch without a NIC, GPUs 3, 7 hang off a root port.
var (
	fakeGPUs = []FakePCIDevice{
		{"pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", 0},
		{"pci0000:27/0000:27:01.0/0000:28:00.0/0000:29:00.0/0000:2a:00.0", 0},
		{"pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:00.0/0000:3a:00.0", 0},
		{"pci0000:5b/0000:5b:01.0/0000:5d:00.0", 0},
		{"pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:00.0/0000:9a:00.0", 1},
		{"pci0000:a7/0000:a7:01.0/0000:a8:00.0/0000:a9:00.0/0000:ab:00.0", 1},
		{"pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:00.0/0000:ba:00.0", 1},
		{"pci0000:d7/0000:d7:01.0/0000:db:00.0", 1},
	}
	fakeNICs = []FakeNIC{
		{Name: "mlx5_0", FakePCIDevice: FakePCIDevice{"pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0", 0}, Uverbs: 0},
		{Name: "mlx5_1", FakePCIDevice: FakePCIDevice{"pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:01.0/0000:3b:00.0", 0}, Uverbs: 1, LinkLayer: "Ethernet"},
		{Name: "mlx5_2", FakePCIDevice: FakePCIDevice{"pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:01.0/0000:9b:00.0", 1}, Uverbs: 2},
		{Name: "mlx5_3", FakePCIDevice: FakePCIDevice{"pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:01.0/0000:bb:00.0", 1}, Uverbs: 3},
	}
)

func fakeSysfs(t *testing.T, nics []FakeNIC) string {
	t.Helper()
	root := t.TempDir()
	if err := WriteFakeSysfs(root, fakeGPUs, nics); err != nil {
		t.Fatal(err)
	}
	return root
}

func gpuLocations(t *testing.T, root string) []Location {
	t.Helper()
	var out []Location
	for _, g := range fakeGPUs {
		loc, err := Locate(root, strings.ToUpper(filepath.Base(g.PCIPath)), -1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, loc)
	}
	return out
}

func TestDiscover(t *testing.T) {
	root := fakeSysfs(t, fakeNICs)
	nics, err := Discover(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	want := []NIC{
		{
			Name: "mlx5_0",
			Location: Location{
				PCIBusID: "0000:19:00.0", NUMANode: 0,
				PCIPath:      "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0",
				ParentBridge: "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0",
				Switch:       "pci0000:15/0000:15:01.0/0000:16:00.0",
			},
			Ports:       []Port{{Num: 1, State: "ACTIVE", LinkLayer: "InfiniBand", HasLinkDowned: true}},
			Uverbs:      "uverbs0",
			DeviceNodes: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"},
		},
	}
	if diff := cmp.Diff(want, nics[:1]); diff != "" {
		t.Errorf("mlx5_0 (-want +got):\n%s", diff)
	}
	var got []string
	for _, n := range nics {
		got = append(got, n.Name+"@"+n.PCIBusID+"/numa"+string(rune('0'+n.NUMANode))+"/"+n.Ports[0].LinkLayer)
	}
	wantNames := []string{
		"mlx5_0@0000:19:00.0/numa0/InfiniBand", "mlx5_1@0000:3b:00.0/numa0/Ethernet",
		"mlx5_2@0000:9b:00.0/numa1/InfiniBand", "mlx5_3@0000:bb:00.0/numa1/InfiniBand",
	}
	if diff := cmp.Diff(wantNames, got); diff != "" {
		t.Errorf("NICs (-want +got):\n%s", diff)
	}

	// No RDMA at all is an empty list, not an error.
	none, err := Discover(context.Background(), t.TempDir())
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("Discover without RDMA = %v, %v; want empty", none, err)
	}
}

func TestLocateGPU(t *testing.T) {
	root := fakeSysfs(t, fakeNICs)
	loc, err := Locate(root, "0000:3A:00.0", -1)
	if err != nil {
		t.Fatal(err)
	}
	want := Location{
		PCIBusID: "0000:3a:00.0", NUMANode: 0,
		PCIPath:      "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:00.0/0000:3a:00.0",
		ParentBridge: "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:00.0",
		Switch:       "pci0000:37/0000:37:01.0/0000:38:00.0",
	}
	if diff := cmp.Diff(want, loc); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Unknown to sysfs: NVML's NUMA node is kept and the error says why.
	loc, err = Locate(root, "0000:ff:00.0", 1)
	if err == nil || loc.NUMANode != 1 || loc.Switch != "" {
		t.Errorf("Locate(missing) = %+v, %v; want NUMA 1, no switch, an error", loc, err)
	}
}

func TestPair(t *testing.T) {
	root := fakeSysfs(t, fakeNICs)
	nics, err := Discover(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	gpus := gpuLocations(t, root)
	got := Pair(gpus, nics)
	want := []Pairing{
		{"0000:18:00.0", []string{"mlx5_0"}, AffinitySwitch},
		{"0000:2a:00.0", []string{"mlx5_0", "mlx5_1"}, AffinityNUMA},
		{"0000:3a:00.0", []string{"mlx5_1"}, AffinitySwitch},
		{"0000:5d:00.0", []string{"mlx5_0", "mlx5_1"}, AffinityNUMA},
		{"0000:9a:00.0", []string{"mlx5_2"}, AffinitySwitch},
		{"0000:ab:00.0", []string{"mlx5_2", "mlx5_3"}, AffinityNUMA},
		{"0000:ba:00.0", []string{"mlx5_3"}, AffinitySwitch},
		{"0000:db:00.0", []string{"mlx5_2", "mlx5_3"}, AffinityNUMA},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pairing (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		gpus []int
		want []string
	}{
		{"two GPUs on NUMA 0 under NIC switches", []int{0, 2}, []string{"mlx5_0", "mlx5_1"}},
		{"one GPU with its own NIC", []int{4}, []string{"mlx5_2"}},
		{"two GPUs on NUMA 1 without NIC switches", []int{5, 7}, []string{"mlx5_2", "mlx5_3"}},
	}
	for _, tc := range tests {
		var locs []Location
		for _, i := range tc.gpus {
			locs = append(locs, gpus[i])
		}
		if diff := cmp.Diff(tc.want, ForGPUs(locs, nics)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}

	// A NIC whose port is down is not paired; its switch-mate falls back
	// to the NUMA node; a GPU with unknown NUMA and no switch gets none.
	down := append([]FakeNIC(nil), fakeNICs...)
	down[0].State = "DOWN"
	nics, err = Discover(context.Background(), fakeSysfs(t, down))
	if err != nil {
		t.Fatal(err)
	}
	if names, aff := Closest(gpus[0], nics); aff != AffinityNUMA || !cmp.Equal(names, []string{"mlx5_1"}) {
		t.Errorf("GPU 0 with its NIC down = %v %v, want [mlx5_1] numa", names, aff)
	}
	if names, aff := Closest(Location{NUMANode: -1}, nics); aff != AffinityNone || names != nil {
		t.Errorf("unplaced GPU = %v %v, want none", names, aff)
	}
}

func needMknod(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: mock device nodes need root (CAP_MKNOD); run the tests as root")
	}
}

func TestCDISpecInjectsTheNIC(t *testing.T) {
	needMknod(t)
	root := fakeSysfs(t, fakeNICs)
	nics, err := Discover(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	devRoot := filepath.Join(t.TempDir(), "dev")
	cdiDir := t.TempDir()
	if err := MakeMockDeviceNodes(devRoot, nics); err != nil {
		t.Fatal(err)
	}
	if err := MakeMockDeviceNodes(devRoot, nics); err != nil {
		t.Fatalf("second MakeMockDeviceNodes: %v", err)
	}
	names, err := WriteCDISpec(cdiDir, CDIOptions{Name: "node1", DevRoot: devRoot}, nics)
	if err != nil {
		t.Fatal(err)
	}
	if names["mlx5_2"] != "rdma/nic=mlx5_2" || len(names) != 4 {
		t.Errorf("names = %v", names)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	spec := &oci.Spec{}
	if _, err := cache.InjectDevices(spec, names["mlx5_2"], names["mlx5_3"]); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
	}
	sort.Strings(paths)
	want := []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs2", "/dev/infiniband/uverbs3"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("injected (-want +got):\n%s", diff)
	}

	// Without usable NICs the spec goes away.
	if _, err := WriteCDISpec(cdiDir, CDIOptions{Name: "node1", DevRoot: devRoot}, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 0 {
		t.Errorf("CDI dir holds %v, want nothing", entries)
	}
}
