package rdma

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Location is where a PCI device sits: what pairing compares.
type Location struct {
	// PCIBusID in sysfs form, "0000:19:00.0".
	PCIBusID string
	// NUMANode is -1 when unknown.
	NUMANode int
	// PCIPath is the device's path below /sys/devices:
	// "pci0000:16/0000:16:02.0/0000:17:00.0/0000:18:00.0/0000:19:00.0".
	PCIPath string
	// ParentBridge is the path of the bridge the device hangs off (a
	// switch's downstream port or a root port).
	ParentBridge string
	// Switch is the path of the upstream port of the PCIe switch the
	// device is behind; devices under one switch share it. Empty when the
	// device hangs directly off a root port.
	Switch string
}

// Port is one port of an RDMA device.
type Port struct {
	Num int
	// State as the kernel names it: "ACTIVE", "DOWN", "INIT", ...
	State string
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE).
	LinkLayer string
	// LinkDowned is the port's counters/link_downed: how many times its
	// link went down since the driver loaded (HasLinkDowned: the file
	// was read). A rise between two readings is a link that went down
	// and came back in between.
	LinkDowned    uint64
	HasLinkDowned bool
}

// NIC is one RDMA device ("mlx5_0").
type NIC struct {
	Name string
	Location
	Ports []Port
	// Uverbs is the verbs device ("uverbs0"); empty when ib_uverbs has
	// not bound one, and then the NIC is unusable from user space.
	Uverbs string
	// DeviceNodes are the container paths a process using the NIC needs:
	// /dev/infiniband/uverbsN and /dev/infiniband/rdma_cm.
	DeviceNodes []string
}

// Active reports whether a port of n is ACTIVE and it has a verbs device.
func (n NIC) Active() bool {
	if n.Uverbs == "" {
		return false
	}
	for _, p := range n.Ports {
		if p.State == "ACTIVE" {
			return true
		}
	}
	return false
}

// Device node names below /dev.
const (
	devDir   = "infiniband"
	devRDMCM = "rdma_cm"
)

// Discover lists the RDMA devices under sysfsRoot ("/sys" on a real node)
// by name. A node without RDMA (no class/infiniband) has none; that is not
// an error.
func Discover(ctx context.Context, sysfsRoot string) ([]NIC, error) {
	classDir := filepath.Join(sysfsRoot, "class", "infiniband")
	entries, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []NIC{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover RDMA devices: %w", err)
	}
	verbs, err := uverbsByDevice(sysfsRoot)
	if err != nil {
		return nil, fmt.Errorf("discover RDMA devices: %w", err)
	}
	nics := make([]NIC, 0, len(entries))
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := readNIC(sysfsRoot, filepath.Join(classDir, e.Name()), e.Name())
		if err != nil {
			return nil, fmt.Errorf("discover RDMA device %s: %w", e.Name(), err)
		}
		n.Uverbs = verbs[n.Name]
		if n.Uverbs != "" {
			n.DeviceNodes = []string{"/dev/" + devDir + "/" + n.Uverbs, "/dev/" + devDir + "/" + devRDMCM}
		}
		nics = append(nics, n)
	}
	sort.Slice(nics, func(i, j int) bool { return nics[i].Name < nics[j].Name })
	return nics, nil
}

func readNIC(sysfsRoot, dir, name string) (NIC, error) {
	n := NIC{Name: name}
	loc, err := locate(sysfsRoot, filepath.Join(dir, "device"))
	if err != nil {
		return n, err
	}
	n.Location = loc
	ports, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	for _, p := range ports {
		num, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		port := Port{Num: num}
		if s, err := readTrim(filepath.Join(dir, "ports", p.Name(), "state")); err == nil {
			// "4: ACTIVE"
			_, st, ok := strings.Cut(s, ":")
			if !ok {
				st = s
			}
			port.State = strings.TrimSpace(st)
		}
		port.LinkLayer, _ = readTrim(filepath.Join(dir, "ports", p.Name(), "link_layer"))
		if s, err := readTrim(filepath.Join(dir, "ports", p.Name(), "counters", "link_downed")); err == nil {
			if v, err := strconv.ParseUint(s, 10, 64); err == nil {
				port.LinkDowned, port.HasLinkDowned = v, true
			}
		}
		n.Ports = append(n.Ports, port)
	}
	sort.Slice(n.Ports, func(i, j int) bool { return n.Ports[i].Num < n.Ports[j].Num })
	return n, nil
}

// uverbsByDevice maps RDMA device names to their uverbs node names from
// class/infiniband_verbs/uverbsN/ibdev.
func uverbsByDevice(sysfsRoot string) (map[string]string, error) {
	dir := filepath.Join(sysfsRoot, "class", "infiniband_verbs")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		ibdev, err := readTrim(filepath.Join(dir, e.Name(), "ibdev"))
		if err != nil {
			continue
		}
		out[ibdev] = e.Name()
	}
	return out, nil
}

// Locate finds a PCI device (a GPU, by the bus ID NVML reports) in the
// sysfs tree under sysfsRoot. numa is used when sysfs has no NUMA node
// (pass NVML's, or -1).
func Locate(sysfsRoot, busID string, numa int) (Location, error) {
	loc, err := locate(sysfsRoot, filepath.Join(sysfsRoot, "bus", "pci", "devices", strings.ToLower(busID)))
	if err != nil {
		return Location{PCIBusID: strings.ToLower(busID), NUMANode: numa}, fmt.Errorf("locate PCI device %s: %w", busID, err)
	}
	if loc.NUMANode < 0 {
		loc.NUMANode = numa
	}
	return loc, nil
}

// locate resolves link (a sysfs "device" symlink) to its PCI path below
// <sysfsRoot>/devices.
func locate(sysfsRoot, link string) (Location, error) {
	loc := Location{NUMANode: -1}
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return loc, fmt.Errorf("resolve %s: %w", link, err)
	}
	devices, err := filepath.EvalSymlinks(filepath.Join(sysfsRoot, "devices"))
	if err != nil {
		return loc, fmt.Errorf("resolve %s/devices: %w", sysfsRoot, err)
	}
	rel, err := filepath.Rel(devices, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return loc, fmt.Errorf("%s resolves to %s, outside %s", link, real, devices)
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "pci") {
		return loc, fmt.Errorf("%s is not a PCI device (%s)", link, rel)
	}
	loc.PCIPath = strings.Join(parts, "/")
	loc.PCIBusID = parts[len(parts)-1]
	loc.ParentBridge = strings.Join(parts[:len(parts)-1], "/")
	// parts: root complex, root port, [switch upstream, downstream]..., device.
	if len(parts) >= 5 {
		loc.Switch = strings.Join(parts[:len(parts)-2], "/")
	}
	if s, err := readTrim(filepath.Join(real, "numa_node")); err == nil {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			loc.NUMANode = n
		}
	}
	return loc, nil
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}
