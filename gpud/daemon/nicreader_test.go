package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/runtime/rdma"
)

// TestNICReaderLinkFlaps: the health loop's NIC reading (fake sysfs) says
// "" for a usable NIC, a port's state when it is not ACTIVE, and a port
// whose link_downed counter rose since the previous reading (a link that
// went down and came back between samples) once: the next reading, with
// no new flap, is clean again (the NIC comes back after probe_after).
func TestNICReaderLinkFlaps(t *testing.T) {
	root := t.TempDir()
	nics := []rdma.FakeNIC{
		{Name: "mlx5_0", FakePCIDevice: rdma.FakePCIDevice{PCIPath: "pci0000:15/0000:15:01.0/0000:16:00.0", NUMANode: 0}, Uverbs: 0},
		{Name: "mlx5_1", FakePCIDevice: rdma.FakePCIDevice{PCIPath: "pci0000:37/0000:37:01.0/0000:38:00.0", NUMANode: 1}, Uverbs: 1},
	}
	if err := rdma.WriteFakeSysfs(root, nil, nics); err != nil {
		t.Fatal(err)
	}
	read := nicReader(root)
	ctx := context.Background()
	get := func() map[string]string {
		t.Helper()
		m, err := read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := get(); m["mlx5_0"] != "" || m["mlx5_1"] != "" || len(m) != 2 {
		t.Fatalf("first reading %q, want both usable", m)
	}
	port := filepath.Join(root, "class", "infiniband", "mlx5_1", "ports", "1")
	if err := os.WriteFile(filepath.Join(port, "counters", "link_downed"), []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := get()
	if m["mlx5_0"] != "" || !strings.Contains(m["mlx5_1"], "port 1 link went down 2 times since the last reading (link_downed 2)") {
		t.Fatalf("after mlx5_1's link flapped twice: %q", m)
	}
	if m := get(); m["mlx5_1"] != "" {
		t.Fatalf("reading after the flap, none new: %q, want mlx5_1 usable", m)
	}
	if err := os.WriteFile(filepath.Join(port, "state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := get(); m["mlx5_1"] != "port 1 DOWN" {
		t.Fatalf("mlx5_1 DOWN: %q", m)
	}
}
