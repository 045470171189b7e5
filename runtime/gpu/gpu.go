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
