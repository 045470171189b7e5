package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FakePCIDevice is a PCI device (a GPU) in a fake sysfs tree.
type FakePCIDevice struct {
	// PCIPath below /sys/devices, ending in the bus ID:
	// "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0".
	PCIPath  string
	NUMANode int
}

// FakeNIC is an RDMA device in a fake sysfs tree.
type FakeNIC struct {
	Name string
	FakePCIDevice
	// Uverbs is N of uverbsN; negative for none.
	Uverbs    int
	State     string // "ACTIVE" when empty
	LinkLayer string // "InfiniBand" when empty
}

// WriteFakeSysfs builds under root the parts of sysfs Discover and Locate
// read: devices/<PCIPath>/numa_node, bus/pci/devices/<bus ID> links,
// class/infiniband/<name>/{device,ports/1/state,ports/1/link_layer,
// ports/1/counters/link_downed (0)} and
// class/infiniband_verbs/uverbsN/ibdev. For tests and mock nodes.
func WriteFakeSysfs(root string, pcis []FakePCIDevice, nics []FakeNIC) error {
	mkPCI := func(d FakePCIDevice) (string, error) {
		dir := filepath.Join(root, "devices", filepath.FromSlash(d.PCIPath))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(strconv.Itoa(d.NUMANode)+"\n"), 0o644); err != nil {
			return "", err
		}
		bus := filepath.Join(root, "bus", "pci", "devices")
		if err := os.MkdirAll(bus, 0o755); err != nil {
			return "", err
		}
		link := filepath.Join(bus, filepath.Base(d.PCIPath))
		_ = os.Remove(link)
		return dir, os.Symlink(filepath.Join("..", "..", "..", "devices", filepath.FromSlash(d.PCIPath)), link)
	}
	for _, d := range pcis {
		if _, err := mkPCI(d); err != nil {
			return fmt.Errorf("fake sysfs PCI device %s: %w", d.PCIPath, err)
		}
	}
	for _, n := range nics {
		if _, err := mkPCI(n.FakePCIDevice); err != nil {
			return fmt.Errorf("fake sysfs NIC %s: %w", n.Name, err)
		}
		dir := filepath.Join(root, "class", "infiniband", n.Name)
		port := filepath.Join(dir, "ports", "1")
		if err := os.MkdirAll(port, 0o755); err != nil {
			return err
		}
		link := filepath.Join(dir, "device")
		_ = os.Remove(link)
		depth := strings.Repeat("../", 3)
		if err := os.Symlink(depth+"devices/"+n.PCIPath, link); err != nil {
			return fmt.Errorf("fake sysfs NIC %s: %w", n.Name, err)
		}
		state, ll := n.State, n.LinkLayer
		if state == "" {
			state = "ACTIVE"
		}
		if ll == "" {
			ll = "InfiniBand"
		}
		code := map[string]int{"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}[state]
		if err := os.WriteFile(filepath.Join(port, "state"), fmt.Appendf(nil, "%d: %s\n", code, state), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(port, "link_layer"), []byte(ll+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(port, "counters"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(port, "counters", "link_downed"), []byte("0\n"), 0o644); err != nil {
			return err
		}
		if n.Uverbs >= 0 {
			v := filepath.Join(root, "class", "infiniband_verbs", "uverbs"+strconv.Itoa(n.Uverbs))
			if err := os.MkdirAll(v, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(v, "ibdev"), []byte(n.Name+"\n"), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
