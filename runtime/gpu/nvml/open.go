package nvml

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpud/gpud/runtime/gpu"
)

// Backend names accepted by Open (the node's --gpus / [node] gpus).
const (
	BackendAuto    = "auto"
	BackendNVML    = "nvml"
	BackendNone    = "none"
	BackendDGXA100 = "mock:dgx-a100"
	BackendDGXH100 = "mock:dgx-h100"
	BackendDGXH200 = "mock:dgx-h200"
)

// Backends lists every value Open accepts, for help texts and config
// validation.
var Backends = []string{BackendAuto, BackendNVML, BackendNone, BackendDGXA100, BackendDGXH100, BackendDGXH200}

var mockServers = map[string]func() *server.Server{
	BackendDGXA100: dgxa100.New,
	BackendDGXH100: dgxh100.New,
	BackendDGXH200: dgxh200.New,
}

// Option configures Open.
type Option func(*options)

type options struct {
	mockSeed    string
	libraryPath string
	// mockHealth is the test hook of mock backends (see WithMockHealthFile).
	mockHealth string
	sysfsRoot  string
}

// WithMockSeed makes mock GPU UUIDs a function of seed and GPU index, so a
// restarted node agent sees the same GPUs. Pass the node name: two nodes
// with different seeds get different UUIDs. Without it mock UUIDs are
// random per Open. Ignored by the real backends.
func WithMockSeed(seed string) Option { return func(o *options) { o.mockSeed = seed } }

// WithLibraryPath loads NVML from path instead of libnvidia-ml.so.1.
func WithLibraryPath(path string) Option { return func(o *options) { o.libraryPath = path } }

// Open returns the GPUs of backend. The real backends ("nvml", "auto")
// load libnvidia-ml.so.1 and initialise it; without a driver they fail
// with ErrNoDriver rather than fall back to something the user did not
// ask for. Close the result to release the library.
func Open(ctx context.Context, backend string, opts ...Option) (gpu.Devices, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open GPU backend %q: %w", backend, err)
	}
	o := options{sysfsRoot: "/sys"}
	for _, opt := range opts {
		opt(&o)
	}
	switch backend {
	case BackendNone:
		return &devices{backend: backend}, nil
	case BackendNVML, BackendAuto:
		return openReal(backend, o)
	}
	if newServer, ok := mockServers[backend]; ok {
		return openMock(backend, newServer(), o), nil
	}
	return nil, fmt.Errorf("unknown GPU backend %q: use one of %s", backend, strings.Join(Backends, ", "))
}

func openReal(backend string, o options) (gpu.Devices, error) {
	var libOpts []nvml.LibraryOption
	if o.libraryPath != "" {
		libOpts = append(libOpts, nvml.WithLibraryPath(o.libraryPath))
	}
	lib := nvml.New(libOpts...)
	// After a failed Init any further NVML call may abort the process, so
	// this is the only call made before checking it.
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w (GPU backend %q: %w); install and load the NVIDIA driver, or start the node with --gpus=mock:dgx-h100 for mock GPUs or --gpus=none for a node without GPUs",
			ErrNoDriver, backend, check("init", ret))
	}
	symbols := map[string]bool{}
	var mu sync.Mutex
	return &devices{
		backend: backend,
		lib:     lib,
		// Symbols newer than the installed driver would abort the process
		// when called, so optional calls are looked up first.
		supports: func(_ nvml.Device, fn string) bool {
			mu.Lock()
			defer mu.Unlock()
			ok, seen := symbols[fn]
			if !seen {
				ok = lib.Extensions().LookupSymbol("nvmlDevice"+fn) == nil
				symbols[fn] = ok
			}
			return ok
		},
		numaFallback:  func(busID string) int { return sysfsNUMANode(o.sysfsRoot, busID) },
		shutdown:      func() error { return check("shutdown", lib.Shutdown()) },
		migMinorsPath: "/proc/driver/nvidia-caps/mig-minors",
	}, nil
}

// Mock topology. The go-nvml servers number GPUs 0000:00:00.0 upwards and
// model neither NUMA nor NVLink; a DGX puts its eight GPUs on these buses,
// the first four on CPU socket (NUMA node) 0, the rest on node 1, all
// peers through NVSwitch. An RDMA test's fake sysfs places NICs next to
// these bus IDs (see runtime/rdma).
var mockBusIDs = map[string][]string{
	// DGX A100 (its BIOS reports 8 NUMA nodes with NPS4; the mock keeps
	// one node per socket).
	BackendDGXA100: {"07", "0f", "47", "4e", "87", "90", "b7", "bd"},
	BackendDGXH100: {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"},
	BackendDGXH200: {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"},
}

// MockPCIBusID is the PCI bus ID ("0000:18:00.0") and NUMA node the mock
// backend gives GPU index, for tests and fake sysfs trees that must agree
// with the mock's topology.
func MockPCIBusID(backend string, index int) (busID string, numa int) {
	ids := mockBusIDs[backend]
	if index < 0 || index >= len(ids) {
		return fmt.Sprintf("0000:%02x:00.0", index), index / 4
	}
	return "0000:" + ids[index] + ":00.0", index / 4
}

// openMock prepares one of go-nvml's DGX servers: deterministic UUIDs,
// the DGX topology above (bus IDs in the form real NVML reports) and MIG
// that behaves like hardware (mockMIG).
func openMock(backend string, s *server.Server, o options) *devices {
	var migs []*mockMIG
	for i, d := range s.Devices {
		md := d.(*server.Device)
		if o.mockSeed != "" {
			md.UUID = mockUUID(o.mockSeed, backend, i)
		}
		busID, numa := MockPCIBusID(backend, i)
		md.PciBusID = busID
		pciDeviceID := md.Config.PciDeviceId
		md.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			p.PciDeviceId = pciDeviceID
			copyCString(p.BusId[:], "0000"+strings.ToUpper(busID))
			return p, nvml.SUCCESS
		}
		md.GetNumaNodeIdFunc = func() (int, nvml.Return) { return numa, nvml.SUCCESS }
		serial := mockSerial(md.UUID)
		md.GetSerialFunc = func() (string, nvml.Return) { return serial, nvml.SUCCESS }
		md.GetP2PStatusFunc = func(peer nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if idx == nvml.P2P_CAPS_INDEX_NVLINK && peer != d {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		migs = append(migs, installMockMIG(md))
	}
	return &devices{
		backend:    backend,
		lib:        s,
		supports:   mockSupports,
		shutdown:   func() error { return check("shutdown", s.Shutdown()) },
		mockMIGs:   migs,
		mockHealth: o.mockHealth,
	}
}

// mockSerial is a mock GPU's board serial, 13 digits derived from its
// UUID (real H100 serials are 13 digits too), stable across restarts.
func mockSerial(uuid string) string {
	sum := sha256.Sum256([]byte(uuid))
	return fmt.Sprintf("1654%09d", binary.BigEndian.Uint64(sum[:8])%1_000_000_000)
}

// mockUUID derives a stable, well-formed GPU UUID from seed, backend and
// index, formatted like NVML's ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx").
func mockUUID(seed, backend string, index int) string {
	sum := sha256.Sum256([]byte(seed + "\x00" + backend + "\x00" + strconv.Itoa(index)))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x50 // RFC 4122 version 5 (name-based, SHA)
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// sysfsNUMANode reads the NUMA node of a PCI device from sysfs, the source
// NVML itself uses; -1 when unknown.
func sysfsNUMANode(sysfsRoot, busID string) int {
	if busID == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(sysfsRoot, "bus/pci/devices", busID, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// mockSupports reports whether the mock implements fn for d: the mocks
// panic on functions whose mock function is unset.
func mockSupports(d nvml.Device, fn string) bool {
	md, ok := d.(*server.Device)
	if !ok {
		return false
	}
	switch fn {
	case fnNumaNodeID:
		return md.GetNumaNodeIdFunc != nil
	case fnP2PStatus:
		return md.GetP2PStatusFunc != nil
	case fnSerial:
		return md.GetSerialFunc != nil
	}
	return false
}
