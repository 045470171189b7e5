package gpu

import "context"

// Device is one physical GPU as discovered. It mirrors spec.GPU field by
// field; the node agent converts (runtime/* must not import gpud/*).
type Device struct {
	Index       int
	UUID        string
	Name        string // NVML product name, "NVIDIA H100 80GB HBM3"
	Model       string // short lower-case model, "h100"
	MemMiB      int64
	PCIBusID    string
	NUMANode    int // -1 when unknown
	Minor       int // /dev/nvidiaN
	NVLinkPeers []string
	MIGEnabled  bool
}

// Devices is the node's view of its GPUs.
type Devices interface {
	// Inventory lists the GPUs in index order. It is cheap enough to call
	// at every registration.
	Inventory(ctx context.Context) ([]Device, error)
	// Close releases the library (nvml.Shutdown). Idempotent.
	Close() error
}

// Sample is one GPU's readings at one instant. A reading the backend
// could not take (unsupported by the GPU or driver) has its Has flag
// false and a zero value.
type Sample struct {
	Index int
	UUID  string
	// UtilPct is the percentage of the last sample period in which a
	// kernel ran (NVML GetUtilizationRates().Gpu).
	UtilPct float64
	// MemUsedMiB is framebuffer memory in use.
	MemUsedMiB float64
	// TempC is the GPU core temperature in degrees Celsius.
	TempC float64
	// PowerW is the board's power draw in watts.
	PowerW float64
	// XID is the last XID error seen (0: none).
	XID float64
	// ECCUncorrected counts uncorrected (double-bit) memory errors since
	// the driver loaded (NVML's volatile counter).
	ECCUncorrected float64

	HasUtil, HasMem, HasTemp, HasPower, HasXID, HasECC bool
}

// Sampler is implemented by Devices backends that can read utilisation,
// memory, temperature and power (the node's metrics). It is optional:
// callers type-assert a Devices for it.
type Sampler interface {
	// Sample reads every GPU once, in index order. It is safe for
	// concurrent use with Inventory and honours ctx between devices.
	Sample(ctx context.Context) ([]Sample, error)
}
