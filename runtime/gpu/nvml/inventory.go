package nvml

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/runtime/gpu"
)

// Names of optional per-device calls, as in the library's symbols
// ("nvmlDevice" + name).
const (
	fnNumaNodeID = "GetNumaNodeId"
	fnP2PStatus  = "GetP2PStatus"
	fnSerial     = "GetSerial"
)

// devices implements gpu.Devices over any nvml.Interface. lib is nil for
// the "none" backend.
type devices struct {
	backend string
	lib     nvml.Interface
	// supports reports whether an optional call is safe on this library
	// and device: a real driver may lack the symbol, a mock may panic.
	supports func(d nvml.Device, fn string) bool
	// numaFallback finds a NUMA node from the PCI bus ID when NVML cannot.
	numaFallback func(busID string) int
	shutdown     func() error
	// migMinorsPath is the driver's nvidia-caps minor table; empty for
	// mocks, which follow the driver's numbering.
	migMinorsPath string
	// mockMIGs is the MIG state of each mock GPU, for tests.
	mockMIGs []*mockMIG
	// mockHealth is a file of readings that override a mock GPU's
	// synthetic ones (WithMockHealthFile); empty: none.
	mockHealth string
	// events receives the real GPUs' XID events once registered (nil
	// before the first sample, or where the driver refused).
	events      nvml.EventSet
	eventsTried bool
	// xids is each GPU's recent XID log (maxXIDLog entries), xidSeq the
	// last sequence number given.
	xids   map[string][]gpu.XIDEvent
	xidSeq uint64

	mu     sync.Mutex // serialises NVML use and guards closed
	closed bool
}

var _ gpu.Devices = (*devices)(nil)

// Inventory implements gpu.Devices.
func (d *devices) Inventory(ctx context.Context) ([]gpu.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("list GPUs of backend %q: already closed", d.backend)
	}
	if d.lib == nil {
		return []gpu.Device{}, nil
	}
	devs, err := d.walk(ctx)
	if err != nil {
		return nil, fmt.Errorf("list GPUs of backend %q: %w", d.backend, err)
	}
	return devs, nil
}

// Close implements gpu.Devices.
func (d *devices) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.shutdown == nil {
		d.closed = true
		return nil
	}
	d.closed = true
	if d.events != nil {
		_ = d.events.Free()
	}
	return d.shutdown()
}

func (d *devices) walk(ctx context.Context) ([]gpu.Device, error) {
	n, ret := d.lib.DeviceGetCount()
	if err := check("DeviceGetCount", ret); err != nil {
		return nil, err
	}
	handles := make([]nvml.Device, n)
	out := make([]gpu.Device, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if err := check(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret); err != nil {
			return nil, err
		}
		handles[i] = h
		dev, err := d.describe(i, h)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		out[i] = dev
	}
	for i, h := range handles {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		peers, err := d.nvlinkPeers(h, handles, out)
		if err != nil {
			return nil, fmt.Errorf("GPU %d (%s): %w", i, out[i].UUID, err)
		}
		out[i].NVLinkPeers = peers
	}
	return out, nil
}

// describe reads one GPU. UUID, name, memory and minor number are
// required; NUMA node and MIG mode are best effort, since consumer GPUs,
// old drivers and the mocks lack some of them.
func (d *devices) describe(index int, h nvml.Device) (gpu.Device, error) {
	dev := gpu.Device{Index: index, NUMANode: -1}
	var ret nvml.Return
	dev.UUID, ret = h.GetUUID()
	if err := check("GetUUID", ret); err != nil {
		return dev, err
	}
	dev.Name, ret = h.GetName()
	if err := check("GetName", ret); err != nil {
		return dev, err
	}
	dev.Model = ModelName(dev.Name)
	mem, ret := h.GetMemoryInfo()
	if err := check("GetMemoryInfo", ret); err != nil {
		return dev, err
	}
	dev.MemMiB = int64(mem.Total / (1 << 20))
	dev.Minor, ret = h.GetMinorNumber()
	if err := check("GetMinorNumber", ret); err != nil {
		return dev, err
	}
	pci, ret := h.GetPciInfo()
	if err := optional(check("GetPciInfo", ret)); err != nil {
		return dev, err
	} else if ret == nvml.SUCCESS {
		dev.PCIBusID = normalizeBusID(goString(pci.BusId[:]))
	}
	if d.supports(h, fnNumaNodeID) {
		numa, ret := h.GetNumaNodeId()
		if err := optional(check(fnNumaNodeID, ret)); err != nil {
			return dev, err
		} else if ret == nvml.SUCCESS && numa >= 0 {
			dev.NUMANode = numa
		}
	}
	if dev.NUMANode < 0 && d.numaFallback != nil {
		dev.NUMANode = d.numaFallback(dev.PCIBusID)
	}
	if d.supports(h, fnSerial) {
		// Boards without a serial (consumer GPUs) say NOT_SUPPORTED.
		if serial, ret := h.GetSerial(); ret == nvml.SUCCESS {
			dev.Serial = serial
		}
	}
	current, _, ret := h.GetMigMode()
	if err := optional(check("GetMigMode", ret)); err != nil {
		return dev, err
	} else if ret == nvml.SUCCESS {
		dev.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
	}
	return dev, nil
}

// nvlinkPeers lists the UUIDs of the GPUs h reaches over NVLink (directly
// or through NVSwitch), in index order.
func (d *devices) nvlinkPeers(h nvml.Device, handles []nvml.Device, devs []gpu.Device) ([]string, error) {
	if !d.supports(h, fnP2PStatus) {
		return nil, nil
	}
	var peers []string
	for j, other := range handles {
		if other == h {
			continue
		}
		st, ret := h.GetP2PStatus(other, nvml.P2P_CAPS_INDEX_NVLINK)
		if err := optional(check(fnP2PStatus, ret)); err != nil {
			return nil, err
		}
		if ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
			peers = append(peers, devs[j].UUID)
		}
	}
	return peers, nil
}

// optional turns "not supported" into nil: the attribute is unknown.
func optional(err error) error {
	if errors.Is(err, ErrNotSupported) {
		return nil
	}
	return err
}

func goString(cs []int8) string {
	b := make([]byte, 0, len(cs))
	for _, c := range cs {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// normalizeBusID turns NVML's "00000000:18:00.0" into sysfs's
// "0000:18:00.0", the form RDMA devices are matched against.
func normalizeBusID(id string) string {
	id = strings.ToLower(id)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 {
		id = dom[len(dom)-4:] + ":" + rest
	}
	return id
}
