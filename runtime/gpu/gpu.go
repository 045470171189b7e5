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
	// Serial is the board serial number (NVML GetSerial): the GPU's
	// identity in health history and RMA reports; "" when unknown.
	Serial string
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
	// XIDs are the GPU's recent XID errors, oldest first (a bounded
	// log: several callers sample, so none may consume them). A caller
	// takes those with a Seq above the last it saw.
	XIDs []XIDEvent
	// ECCUncorrected and ECCCorrected count uncorrected (double-bit) and
	// corrected (single-bit) memory errors since the driver loaded
	// (NVML's volatile counters).
	ECCUncorrected, ECCCorrected float64
	// RowRemapPending: a remapping waits for a GPU reset; RowRemapFailed:
	// a row could not be remapped (NVML GetRemappedRows).
	RowRemapPending, RowRemapFailed bool
	// RowsRemapped counts the GPU's remapped rows, correctable and
	// uncorrectable (GetRemappedRows): a count that keeps rising is
	// memory wearing out (gpud/health's trend rule).
	RowsRemapped float64
	// NVLinkUp counts the active NVLinks; NVLinkErrors sums their
	// replay, recovery and CRC error counters.
	NVLinkUp     int
	NVLinkErrors float64
	// PCIe link: current and maximum width and generation.
	PCIeWidth, PCIeMaxWidth, PCIeGen, PCIeMaxGen int
	// Throttle is the clock-event-reason bit mask
	// (GetCurrentClocksEventReasons).
	Throttle uint64

	HasUtil, HasMem, HasTemp, HasPower, HasXID, HasECC bool
	HasRowRemap, HasNVLink, HasPCIe, HasThrottle       bool
}

// XIDEvent is one XID error of a GPU. Seq grows by one per event on the
// backend (across its GPUs), from 1.
type XIDEvent struct {
	Seq uint64
	XID int
	// MIG is the UUID of the MIG instance NVML attributed the error to
	// (the event's GPU instance), "" for the whole GPU.
	MIG string
}

// Sampler is implemented by Devices backends that can read utilisation,
// memory, temperature and power (the node's metrics). It is optional:
// callers type-assert a Devices for it.
type Sampler interface {
	// Sample reads every GPU once, in index order. It is safe for
	// concurrent use with Inventory and honours ctx between devices.
	Sample(ctx context.Context) ([]Sample, error)
}
