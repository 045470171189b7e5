package gpu

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func TestMain(m *testing.M) {
	// InjectCDIDevices must not leave CDI's directory watcher running.
	goleak.VerifyTestMain(m)
}

func testDevices(prefix string, n int) []Device {
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{Index: i, Minor: i, UUID: prefix + "-" + strings.Repeat(string(rune('a'+i)), 8), Model: "h100"}
	}
	return devs
}

// needMknod skips loudly where mock device nodes cannot be made.
func needMknod(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: mock device nodes need root (CAP_MKNOD); run the tests as root")
	}
}

func TestWriteCDISpecInjectsExactlyTheChosenGPU(t *testing.T) {
	needMknod(t)
	devRoot := filepath.Join(t.TempDir(), "dev")
	cdiDir := t.TempDir()
	devs := testDevices("GPU-node1", 3)
	if err := MakeMockDeviceNodes(devRoot, devs); err != nil {
		t.Fatal(err)
	}
	names, err := WriteCDISpec(cdiDir, CDIOptions{Name: "node1", DevRoot: devRoot}, devs)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := map[string]string{
		devs[0].UUID: "nvidia.com/gpu=" + devs[0].UUID,
		devs[1].UUID: "nvidia.com/gpu=" + devs[1].UUID,
		devs[2].UUID: "nvidia.com/gpu=" + devs[2].UUID,
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("CDI names (-want +got):\n%s", diff)
	}

	// The CDI library itself must accept the file.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	got := cache.ListDevices()
	sort.Strings(got)
	want := []string{names[devs[0].UUID], names[devs[1].UUID], names[devs[2].UUID]}
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CDI devices (-want +got):\n%s", diff)
	}

	spec := &oci.Spec{}
	if err := InjectCDIDevices(spec, []string{cdiDir}, names[devs[1].UUID]); err != nil {
		t.Fatal(err)
	}
	if spec.Linux == nil {
		t.Fatal("injection left spec.Linux nil")
	}
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
		if d.Type != "c" {
			t.Errorf("device %s has type %q, want c", d.Path, d.Type)
		}
		if d.Path == "/dev/nvidia1" && (d.Major != 195 || d.Minor != 1) {
			t.Errorf("/dev/nvidia1 is %d:%d, want 195:1", d.Major, d.Minor)
		}
		if d.Path == "/dev/nvidiactl" && (d.Major != 195 || d.Minor != 255) {
			t.Errorf("/dev/nvidiactl is %d:%d, want 195:255", d.Major, d.Minor)
		}
	}
	sort.Strings(paths)
	wantPaths := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1", "/dev/nvidiactl"}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("injected device nodes (-want +got):\n%s", diff)
	}
	// runc needs a cgroup rule per device, or the container cannot open it.
	if n := len(spec.Linux.Resources.Devices); n != len(wantPaths) {
		t.Errorf("got %d device cgroup rules, want %d", n, len(wantPaths))
	}

	// No temp files left behind by the atomic write.
	entries, err := os.ReadDir(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "node1.json" {
		t.Errorf("CDI dir holds %v, want only node1.json", entries)
	}
}

// In `gpud standalone` node agents share a host; each has its own GPUs,
// dev root and spec file. Two specs of the same kind in one dir must not
// conflict, and each agent resolves only its own devices.
func TestTwoNodesShareACDIDir(t *testing.T) {
	needMknod(t)
	base := t.TempDir()
	cdiDir := filepath.Join(base, "cdi")
	all := map[string]string{}
	for _, node := range []string{"n1", "n2"} {
		devRoot := filepath.Join(base, node, "dev")
		devs := testDevices("GPU-"+node, 2)
		if err := MakeMockDeviceNodes(devRoot, devs); err != nil {
			t.Fatal(err)
		}
		// Calling it again, as a restarted agent does, must keep working.
		if err := MakeMockDeviceNodes(devRoot, devs); err != nil {
			t.Fatalf("second MakeMockDeviceNodes: %v", err)
		}
		names, err := WriteCDISpec(cdiDir, CDIOptions{Name: node, DevRoot: devRoot}, devs)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range names {
			all[k] = v
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	if got := len(cache.ListDevices()); got != 4 {
		t.Errorf("got %d CDI devices, want 4", got)
	}
	spec := &oci.Spec{}
	if err := InjectCDIDevices(spec, []string{cdiDir}, all["GPU-n2-bbbbbbbb"]); err != nil {
		t.Fatal(err)
	}
	for _, d := range spec.Linux.Devices {
		if d.Path == "/dev/nvidia1" {
			return
		}
	}
	t.Errorf("n2's GPU 1 not injected: %+v", spec.Linux.Devices)
}

func TestWriteCDISpecErrors(t *testing.T) {
	needMknod(t)
	devRoot := filepath.Join(t.TempDir(), "dev")
	devs := testDevices("GPU-x", 2)
	if err := MakeMockDeviceNodes(devRoot, devs[:1]); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    CDIOptions
		devs    []Device
		wantErr string
	}{
		{"missing GPU node", CDIOptions{Name: "n", DevRoot: devRoot}, devs, "nvidia1"},
		{"no ctl node", CDIOptions{Name: "n", DevRoot: t.TempDir()}, devs[:1], "nvidiactl"},
		{"bad name", CDIOptions{Name: "../n", DevRoot: devRoot}, devs[:1], "plain file name"},
		{"empty name", CDIOptions{DevRoot: devRoot}, devs[:1], "plain file name"},
		{"bad vendor", CDIOptions{Vendor: "nvidia com", Name: "n", DevRoot: devRoot}, devs[:1], "CDI vendor"},
		{"bad uuid", CDIOptions{Name: "n", DevRoot: devRoot}, []Device{{UUID: "GPU-a/b"}}, "not a valid CDI device name"},
		{"dup uuid", CDIOptions{Name: "n", DevRoot: devRoot}, []Device{devs[0], devs[0]}, "appears twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteCDISpec(dir, tc.opts, tc.devs)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("WriteCDISpec error = %v, want one containing %q", err, tc.wantErr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("failed write left %v in the CDI dir", entries)
			}
		})
	}
}

func TestWriteCDISpecWithoutGPUsRemovesStaleSpec(t *testing.T) {
	needMknod(t)
	devRoot := filepath.Join(t.TempDir(), "dev")
	cdiDir := t.TempDir()
	devs := testDevices("GPU-s", 1)
	if err := MakeMockDeviceNodes(devRoot, devs); err != nil {
		t.Fatal(err)
	}
	opts := CDIOptions{Name: "n", DevRoot: devRoot}
	if _, err := WriteCDISpec(cdiDir, opts, devs); err != nil {
		t.Fatal(err)
	}
	// The node restarts with --gpus=none and no device nodes.
	names, err := WriteCDISpec(cdiDir, CDIOptions{Name: "n", DevRoot: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Errorf("names = %v, want none", names)
	}
	if _, err := os.Stat(CDISpecPath(cdiDir, opts)); !os.IsNotExist(err) {
		t.Errorf("stale spec still there: %v", err)
	}
}

func TestInjectUnknownDevice(t *testing.T) {
	err := InjectCDIDevices(&oci.Spec{}, []string{t.TempDir()}, "nvidia.com/gpu=GPU-nope")
	if err == nil || !strings.Contains(err.Error(), "GPU-nope not found") {
		t.Fatalf("InjectCDIDevices error = %v, want not found", err)
	}
}

func TestMakeMockDeviceNodesReplacesWrongNode(t *testing.T) {
	needMknod(t)
	devRoot := t.TempDir()
	// A plain file where nvidia0 belongs, e.g. left by a broken run.
	if err := os.WriteFile(filepath.Join(devRoot, "nvidia0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MakeMockDeviceNodes(devRoot, testDevices("GPU-r", 1)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(devRoot, "nvidia0"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(uint64(st.Rdev)) != 195 || unix.Minor(uint64(st.Rdev)) != 0 {
		t.Errorf("nvidia0 mode %o rdev %d:%d, want char 195:0", st.Mode, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	}
	if st.Mode&0o777 != 0o666 {
		t.Errorf("nvidia0 permissions %o, want 666", st.Mode&0o777)
	}
}
