package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/process"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
	"github.com/gpud/gpud/runtime/gpu/nvml"
	"github.com/gpud/gpud/runtime/rdma"
)

// inventoryOptions say where a node's GPUs come from and what it offers.
type inventoryOptions struct {
	Name     string
	Backend  string // auto, nvml, none, mock:dgx-*
	CPUs     int    // 0 = detect
	MemMiB   int64  // 0 = detect
	Features []string
	CDIDir   string
	// DevRoot holds the host device nodes: /dev for real GPUs; a private
	// directory for mock GPUs, where fake char devices are made.
	DevRoot string
	// MockHealthFile overrides mock GPUs' readings (fault injection; see
	// nvml.WithMockHealthFile).
	MockHealthFile string
	// MIGMode returns [node] mig (or its mig_gpus override) for a GPU
	// index; nil means "off" for all.
	MIGMode func(index int) string
	// RDMASysfs is where NICs are discovered ("" skips RDMA); anything but
	// /sys is a fake tree, whose device nodes are made under DevRoot.
	RDMASysfs string
	// Version is gpud's, registered with the inventory.
	Version string
}

// buildInventory discovers the node's GPUs, writes their CDI spec,
// switches MIG mode on where [node] mig asks for it, and returns what the
// agent registers and (when some GPU is in static or dynamic MIG mode)
// what the agent needs to partition them. The caller closes devs.
func buildInventory(ctx context.Context, o inventoryOptions) (spec.Inventory, gpu.Devices, *node.MIGConfig, error) {
	inv, devs, err := discover(ctx, o)
	if err != nil {
		return spec.Inventory{}, nil, nil, err
	}
	mc, err := setupMIG(ctx, o, devs, &inv)
	if err == nil {
		err = setupRDMA(ctx, o, &inv)
	}
	if err != nil {
		devs.Close()
		return spec.Inventory{}, nil, nil, err
	}
	return inv, devs, mc, nil
}

// discover lists the GPUs and writes their CDI spec.
func discover(ctx context.Context, o inventoryOptions) (spec.Inventory, gpu.Devices, error) {
	devs, err := nvml.Open(ctx, o.Backend, nvml.WithMockSeed(o.Name), nvml.WithMockHealthFile(o.MockHealthFile))
	if err != nil {
		return spec.Inventory{}, nil, fmt.Errorf("open GPUs (%s): %w", o.Backend, err)
	}
	gpus, err := devs.Inventory(ctx)
	if err != nil {
		devs.Close()
		return spec.Inventory{}, nil, fmt.Errorf("list GPUs: %w", err)
	}
	mock := strings.HasPrefix(o.Backend, "mock:")
	devRoot := o.DevRoot
	if !mock || devRoot == "" {
		devRoot = "/dev"
	}
	if mock && len(gpus) > 0 {
		if err := gpu.MakeMockDeviceNodes(devRoot, gpus); err != nil {
			devs.Close()
			return spec.Inventory{}, nil, fmt.Errorf("make device nodes for mock GPUs: %w", err)
		}
	}
	if err := os.MkdirAll(o.CDIDir, 0o755); err != nil {
		devs.Close()
		return spec.Inventory{}, nil, fmt.Errorf("create CDI dir: %w", err)
	}
	names, err := gpu.WriteCDISpec(o.CDIDir, gpu.CDIOptions{Name: o.Name, DevRoot: devRoot}, gpus)
	if err != nil {
		devs.Close()
		return spec.Inventory{}, nil, fmt.Errorf("write CDI spec: %w", err)
	}
	inv := spec.Inventory{
		Name:     o.Name,
		CPUs:     o.CPUs,
		MemMiB:   o.MemMiB,
		Features: o.Features,
		Version:  o.Version,
	}
	if inv.CPUs <= 0 {
		inv.CPUs = goruntime.NumCPU()
	}
	if inv.MemMiB <= 0 {
		if inv.MemMiB, err = process.HostMemMiB(); err != nil {
			devs.Close()
			return spec.Inventory{}, nil, err
		}
	}
	for _, g := range gpus {
		inv.GPUs = append(inv.GPUs, spec.GPU{
			Index:       g.Index,
			UUID:        g.UUID,
			Name:        g.Name,
			Model:       g.Model,
			MemMiB:      g.MemMiB,
			PCIBusID:    g.PCIBusID,
			NUMANode:    g.NUMANode,
			NVLinkPeers: g.NVLinkPeers,
			MIGEnabled:  g.MIGEnabled,
			Serial:      g.Serial,
			CDIName:     names[g.UUID],
			Health:      "ok",
		})
	}
	return inv, devs, nil
}

// setupMIG switches MIG mode on for the GPUs whose [node] mig is static or
// dynamic, writes the CDI spec of their existing instances and records
// their profile table and layout in inv.
func setupMIG(ctx context.Context, o inventoryOptions, devs gpu.Devices, inv *spec.Inventory) (*node.MIGConfig, error) {
	if o.MIGMode == nil {
		return nil, nil
	}
	managed := false
	for _, g := range inv.GPUs {
		managed = managed || o.MIGMode(g.Index) != "off"
	}
	if !managed {
		return nil, nil
	}
	m, ok := devs.(gpu.MIG)
	if !ok {
		return nil, fmt.Errorf("[node] mig: the %s GPU backend cannot partition GPUs; set mig = \"off\"", o.Backend)
	}
	state, err := m.MIGState(ctx)
	if err != nil {
		return nil, err
	}
	modes := map[string]string{}
	for _, g := range state {
		mode := o.MIGMode(g.Index)
		if mode == "off" {
			continue
		}
		if !g.Capable {
			return nil, fmt.Errorf("[node] mig: GPU %d (%s) does not support MIG; set its mig_gpus entry to \"off\"", g.Index, g.UUID)
		}
		if !g.Mode.Current {
			if err := m.SetMIGMode(ctx, g.UUID, true); err != nil {
				return nil, fmt.Errorf("[node] mig = %q: %w", mode, err)
			}
		}
		modes[g.UUID] = mode
	}
	if state, err = m.MIGState(ctx); err != nil {
		return nil, err
	}
	for _, g := range state {
		if modes[g.UUID] != "" && !g.Mode.Current {
			return nil, fmt.Errorf("[node] mig: GPU %d (%s) needs a GPU reset before MIG mode is on; reset it (nvidia-smi -r -i %d) or set mig = \"off\"", g.Index, g.UUID, g.Index)
		}
	}
	mock := strings.HasPrefix(o.Backend, "mock:")
	devRoot := o.DevRoot
	if !mock || devRoot == "" {
		devRoot = "/dev"
	}
	mc := &node.MIGConfig{MIG: m, Modes: modes, CDIDir: o.CDIDir, CDI: gpu.CDIOptions{Name: o.Name, DevRoot: devRoot}, MockDevices: mock}
	var all []gpu.MIGDevice
	for _, g := range state {
		if modes[g.UUID] != "" {
			all = append(all, g.Instances...)
		}
	}
	if mock {
		if err := gpu.MakeMockMIGDeviceNodes(devRoot, all); err != nil {
			return nil, err
		}
	}
	if _, err := gpu.WriteMIGCDISpec(o.CDIDir, mc.CDI, all); err != nil {
		return nil, fmt.Errorf("write MIG CDI spec: %w", err)
	}
	layout := node.MIGLayout(state)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		mode := modes[g.UUID]
		if mode == "" {
			continue
		}
		st := state[slices.IndexFunc(state, func(x gpu.MIGGPU) bool { return x.UUID == g.UUID })]
		g.MIGEnabled, g.MIGMode, g.MIGSlices = true, mode, layout[g.UUID]
		for _, p := range st.Profiles {
			sp := spec.MIGProfile{Name: p.Name, Slices: p.Slices, MemMiB: p.MemMiB, MaxCount: p.MaxCount}
			for _, pl := range p.Placements {
				sp.Placements = append(sp.Placements, spec.MIGPlacement{Start: pl.Start, Size: pl.Size})
			}
			g.MIGProfiles = append(g.MIGProfiles, sp)
		}
	}
	return mc, nil
}

// setupRDMA discovers the RDMA NICs, pairs every GPU with the closest
// active ones and writes the NICs' CDI spec.
func setupRDMA(ctx context.Context, o inventoryOptions, inv *spec.Inventory) error {
	if o.RDMASysfs == "" {
		return nil
	}
	nics, err := rdma.Discover(ctx, o.RDMASysfs)
	if err != nil {
		return fmt.Errorf("[node] rdma_sysfs: %w", err)
	}
	if len(nics) == 0 {
		return nil
	}
	devRoot := "/dev"
	if filepath.Clean(o.RDMASysfs) != "/sys" && o.DevRoot != "" {
		devRoot = o.DevRoot
		if err := rdma.MakeMockDeviceNodes(devRoot, nics); err != nil {
			return fmt.Errorf("make device nodes for fake RDMA NICs: %w", err)
		}
	}
	names, err := rdma.WriteCDISpec(o.CDIDir, rdma.CDIOptions{Name: o.Name, DevRoot: devRoot}, nics)
	if err != nil {
		return fmt.Errorf("write RDMA CDI spec: %w", err)
	}
	for _, n := range nics {
		inv.NICs = append(inv.NICs, spec.NIC{Name: n.Name, PCIBusID: n.PCIBusID, NUMANode: n.NUMANode, Switch: n.Switch,
			Active: n.Active() && names[n.Name] != "", CDIName: names[n.Name]})
	}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		// Without the GPU in sysfs (no PCIe path) pairing falls back to
		// NVML's NUMA node.
		loc, _ := rdma.Locate(o.RDMASysfs, g.PCIBusID, g.NUMANode)
		g.NICs, _ = rdma.Closest(loc, nics)
	}
	return nil
}
