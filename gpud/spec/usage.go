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

// GPUUsageTotal is the GPU use of many ended attempts of an (account,
// user) on one model, summed: the fairshare feed's read of old history.
type GPUUsageTotal struct {
	Account, User, Model string
	// GPUSeconds is in whole-GPU equivalents, as GPUUsage.GPUs.
	GPUSeconds float64
	// Mid is the GPU-second-weighted mean of the attempts' midpoints,
	// where their decay is reckoned.
	Mid time.Time
}

// NodeEvent is a change of a node's availability: down, up, drain,
// resume. Times are kept to the second in accounting.
type NodeEvent struct {
	Time   time.Time `json:"time"`
	Node   string    `json:"node"`
	Event  string    `json:"event"`
	Reason string    `json:"reason,omitempty"`
	// Actor is who caused it: a user name for drain/resume, "gpud" for the
	// controller's own health and heartbeat decisions.
	Actor string `json:"actor,omitempty"`
	// GPU, when set, makes this an entry of one GPU's health history
	// (Event NodeEventGPU) rather than a change of the node's
	// availability: accounting keeps it apart, by GPU serial.
	GPU *GPUEvent `json:"gpu,omitempty"`
}

// Node events the controller records.
const (
	NodeEventDown   = "down"   // missed heartbeats
	NodeEventUp     = "up"     // back after a down, by heartbeat or registration
	NodeEventDrain  = "drain"  // gpuq drain
	NodeEventResume = "resume" // gpuq resume: clears drain and down
	NodeEventGPU    = "gpu"    // a GPU health event (NodeEvent.GPU)
)
