package spec

import "time"

// GPUUsage is one ended attempt's GPU use, as accounting bills it: the
// fairshare feed from accounting.db to the controller.
type GPUUsage struct {
	JobID         JobID
	Attempt       int
	Account, User string
	// Model is the GPU model of the devices ("h100").
	Model string
	// GPUs is in whole-GPU equivalents: a MIG slice counts its share of
	// the GPU's compute slices, a GPU share its fraction.
	GPUs       float64
	Start, End time.Time
}
