package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
	"github.com/gpud/gpud/runtime/gpu/nvml"
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
}

// buildInventory discovers the node's GPUs, writes their CDI spec and
// returns what the agent registers. The caller closes devs.
func buildInventory(ctx context.Context, o inventoryOptions) (spec.Inventory, gpu.Devices, error) {
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
		Version:  version,
	}
	if inv.CPUs <= 0 {
		inv.CPUs = goruntime.NumCPU()
	}
	if inv.MemMiB <= 0 {
		if inv.MemMiB, err = hostMemMiB(); err != nil {
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
			CDIName:     names[g.UUID],
			Health:      "ok",
		})
	}
	return inv, devs, nil
}

// hostMemMiB reads MemTotal from /proc/meminfo.
func hostMemMiB() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("detect memory: %w; set [node] mem", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("detect memory: parse %q: %w", sc.Text(), err)
			}
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("detect memory: no MemTotal in /proc/meminfo; set [node] mem")
}
