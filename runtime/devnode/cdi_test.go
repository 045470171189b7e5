package devnode

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestCDISpecWriteAndRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make device nodes")
	}
	devRoot := t.TempDir()
	major, err := UnusedCharMajor("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"ctl", "d0", "d1"} {
		if err := Mknod(filepath.Join(devRoot, n), major, uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(devRoot, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCDISpec("vendor com", "x", "../n", devRoot); err == nil ||
		!strings.Contains(err.Error(), "CDI vendor") || !strings.Contains(err.Error(), "plain file name") {
		t.Fatalf("NewCDISpec with a bad vendor and stem: %v, want both problems", err)
	}
	s, err := NewCDISpec("example.com", "dev", "n1", devRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddCommon("ctl", false); err != nil {
		t.Fatal(err)
	}
	if err := s.AddCommon("absent", true); err != nil {
		t.Fatalf("optional absent node: %v", err)
	}
	if err := s.AddCommon("plain", false); err == nil {
		t.Fatal("a regular file was accepted as a device node")
	}
	if err := s.AddDevice("a", "d0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, node, want string }{
		{"a", "d1", "appears twice"}, {"b/c", "d1", "not a valid CDI device name"}, {"b", "absent", "device node"},
	} {
		if err := s.AddDevice(tc.name, tc.node); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddDevice(%q, %q) = %v, want %q", tc.name, tc.node, err, tc.want)
		}
	}
	path := filepath.Join(t.TempDir(), "cdi", "n1.json")
	if err := s.Write(path); err != nil {
		t.Fatal(err)
	}
	var got cdispec.Spec
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "example.com/dev" || got.Version == "" || len(got.Devices) != 1 || got.Devices[0].Name != "a" ||
		len(got.ContainerEdits.DeviceNodes) != 1 || got.ContainerEdits.DeviceNodes[0].Path != "/dev/ctl" {
		t.Fatalf("spec = %s", data)
	}
	if s.Names()["a"] != "example.com/dev=a" {
		t.Errorf("names = %v", s.Names())
	}
	empty, _ := NewCDISpec("example.com", "dev", "n1", devRoot)
	if err := empty.Write(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a spec without devices left %s: %v", path, err)
	}
}
