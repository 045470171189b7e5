package gpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func testMIG(parentMinor, gi int) MIGDevice {
	giMinor, ciMinor, err := MIGCapMinors(parentMinor, gi, 0)
	if err != nil {
		panic(err)
	}
	return MIGDevice{
		UUID:        fmt.Sprintf("MIG-%08x-0000-5000-8000-%012x", parentMinor, gi),
		ParentIndex: parentMinor, ParentMinor: parentMinor, Profile: "1g.10gb",
		Placement: MIGPlacement{Start: gi, Size: 1}, GI: gi, CI: 0,
		GICapMinor: giMinor, CICapMinor: ciMinor,
		DeviceNodes: MIGDeviceNodes(parentMinor, giMinor, ciMinor),
	}
}

func injectedPaths(t *testing.T, spec *oci.Spec) []string {
	t.Helper()
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
	}
	sort.Strings(paths)
	return paths
}

// A container given one MIG slice gets exactly that slice's nodes: its
// parent GPU, its two nvidia-caps nodes and the driver's shared nodes, and
// nothing of the node's other slices or GPUs.
func TestWriteMIGCDISpecInjectsExactlyTheChosenSlice(t *testing.T) {
	needMknod(t)
	devRoot := filepath.Join(t.TempDir(), "dev")
	cdiDir := t.TempDir()
	devs := testDevices("GPU-node1", 2)
	migs := []MIGDevice{testMIG(0, 0), testMIG(0, 1), testMIG(1, 0)}
	if err := MakeMockDeviceNodes(devRoot, devs); err != nil {
		t.Fatal(err)
	}
	if err := MakeMockMIGDeviceNodes(devRoot, migs); err != nil {
		t.Fatal(err)
	}
	if err := MakeMockMIGDeviceNodes(devRoot, migs); err != nil {
		t.Fatalf("second MakeMockMIGDeviceNodes: %v", err)
	}
	opts := CDIOptions{Name: "node1", DevRoot: devRoot}
	if _, err := WriteCDISpec(cdiDir, opts, devs); err != nil {
		t.Fatal(err)
	}
	names, err := WriteMIGCDISpec(cdiDir, opts, migs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names[migs[1].UUID], "nvidia.com/mig="+migs[1].UUID; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}

	spec := &oci.Spec{}
	if err := InjectCDIDevices(spec, []string{cdiDir}, names[migs[1].UUID]); err != nil {
		t.Fatal(err)
	}
	// GPU 0 GI 1 CI 0: caps 12 and 13 (gpu0/gi1/access, gpu0/gi1/ci0/access).
	want := []string{"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl"}
	if diff := cmp.Diff(want, injectedPaths(t, spec)); diff != "" {
		t.Errorf("injected nodes (-want +got):\n%s", diff)
	}
	for _, d := range spec.Linux.Devices {
		if d.Path == "/dev/nvidia-caps/nvidia-cap13" && d.Minor != 13 {
			t.Errorf("cap13 has minor %d", d.Minor)
		}
	}
	if n := len(spec.Linux.Resources.Devices); n != len(want) {
		t.Errorf("got %d device cgroup rules, want %d", n, len(want))
	}

	// Two slices of one GPU share its node once; a slice of GPU 1 adds
	// nvidia1.
	spec = &oci.Spec{}
	if err := InjectCDIDevices(spec, []string{cdiDir}, names[migs[0].UUID], names[migs[1].UUID], names[migs[2].UUID]); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13", "/dev/nvidia-caps/nvidia-cap138", "/dev/nvidia-caps/nvidia-cap139",
		"/dev/nvidia-caps/nvidia-cap3", "/dev/nvidia-caps/nvidia-cap4",
		"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl",
	}
	if diff := cmp.Diff(want, injectedPaths(t, spec)); diff != "" {
		t.Errorf("injected nodes for three slices (-want +got):\n%s", diff)
	}

	// A destroyed slice disappears from the rewritten spec; with none left
	// the file goes.
	if _, err := WriteMIGCDISpec(cdiDir, opts, migs[:1]); err != nil {
		t.Fatal(err)
	}
	err = InjectCDIDevices(&oci.Spec{}, []string{cdiDir}, names[migs[1].UUID])
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("inject destroyed slice = %v, want not found", err)
	}
	if _, err := WriteMIGCDISpec(cdiDir, opts, nil); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cdiDir)
	if len(entries) != 1 || entries[0].Name() != "node1.json" {
		t.Errorf("CDI dir holds %v, want only node1.json", entries)
	}
}

func TestWriteMIGCDISpecErrors(t *testing.T) {
	needMknod(t)
	devRoot := filepath.Join(t.TempDir(), "dev")
	if err := MakeMockDeviceNodes(devRoot, testDevices("GPU-x", 1)); err != nil {
		t.Fatal(err)
	}
	good := testMIG(0, 0)
	if err := MakeMockMIGDeviceNodes(devRoot, []MIGDevice{good}); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.UUID = "MIG-GPU-x/1/0"
	tests := []struct {
		name    string
		migs    []MIGDevice
		wantErr string
	}{
		{"missing cap node", []MIGDevice{testMIG(0, 2)}, "nvidia-cap21"},
		{"legacy UUID", []MIGDevice{bad}, "not a valid CDI device name"},
		{"dup", []MIGDevice{good, good}, "appears twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteMIGCDISpec(dir, CDIOptions{Name: "n", DevRoot: devRoot}, tc.migs)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("failed write left %v", entries)
			}
		})
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(devRoot, "nvidia-caps", "nvidia-cap4"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("nvidia-cap4 not a char device: %v", err)
	}
}

func TestMIGCapMinors(t *testing.T) {
	tests := []struct{ gpu, gi, ci, wantGI, wantCI int }{
		{0, 0, 0, 3, 4},
		{0, 0, 7, 3, 11},
		{0, 1, 0, 12, 13},
		{1, 0, 0, 138, 139},
		{7, 14, 7, 3 + 7*135 + 14*9, 3 + 7*135 + 14*9 + 8},
	}
	for _, tc := range tests {
		g, c, err := MIGCapMinors(tc.gpu, tc.gi, tc.ci)
		if err != nil || g != tc.wantGI || c != tc.wantCI {
			t.Errorf("MIGCapMinors(%d, %d, %d) = %d, %d, %v; want %d, %d", tc.gpu, tc.gi, tc.ci, g, c, err, tc.wantGI, tc.wantCI)
		}
	}
	if _, _, err := MIGCapMinors(0, 15, 0); err == nil {
		t.Error("GI 15 accepted")
	}
}

func TestFreePlacementsAndProfile(t *testing.T) {
	g := MIGGPU{
		Index: 0, UUID: "GPU-a", Capable: true, Mode: MIGMode{Current: true, Pending: true},
		Profiles: []MIGProfile{
			{Name: "1g.10gb", Slices: 1, MaxCount: 7, Placements: []MIGPlacement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
			{Name: "3g.40gb", Slices: 3, MaxCount: 2, Placements: []MIGPlacement{{0, 4}, {4, 4}}},
			{Name: "4g.40gb", Slices: 4, MaxCount: 1, Placements: []MIGPlacement{{0, 4}}},
		},
		Instances: []MIGDevice{{Profile: "3g.40gb", Placement: MIGPlacement{4, 4}}},
	}
	p4, _ := g.Profile("4g.40gb")
	if diff := cmp.Diff([]MIGPlacement{{0, 4}}, g.FreePlacements(p4)); diff != "" {
		t.Errorf("4g free (-want +got):\n%s", diff)
	}
	p1, _ := g.Profile("1g.10gb")
	if got := len(g.FreePlacements(p1)); got != 4 {
		t.Errorf("1g free = %d, want 4", got)
	}
	_, err := g.Profile("2g.20gb")
	if !errors.Is(err, ErrUnknownProfile) || !strings.Contains(err.Error(), "offers 1g.10gb, 3g.40gb, 4g.40gb") {
		t.Errorf("Profile(2g.20gb) = %v", err)
	}
	g.Mode.Current = false
	if _, err := g.Profile("1g.10gb"); !errors.Is(err, ErrMIGDisabled) {
		t.Errorf("Profile with MIG off = %v, want ErrMIGDisabled", err)
	}
}
