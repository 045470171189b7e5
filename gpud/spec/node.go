package spec

// NodeState follows sinfo's names.
type NodeState string

// Node states.
const (
	NodeIdle      NodeState = "IDLE"
	NodeMixed     NodeState = "MIXED"
	NodeAllocated NodeState = "ALLOCATED"
	NodeDown      NodeState = "DOWN"
	NodeDrain     NodeState = "DRAIN"
	// NodeDraining is a drained node that still runs jobs.
	NodeDraining NodeState = "DRAINING"
	NodeUnknown  NodeState = "UNKNOWN"
)

// GPU is one physical GPU as the node discovered it.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Name is NVML's product name ("NVIDIA H100 80GB HBM3"); Model is the
	// short lower-case model users ask for ("h100").
	Name     string `json:"name"`
	Model    string `json:"model"`
	MemMiB   int64  `json:"mem_mib"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	NUMANode int    `json:"numa_node"`
	// NVLinkPeers are UUIDs of GPUs reachable over NVLink/NVSwitch.
	NVLinkPeers []string `json:"nvlink_peers,omitempty"`
	MIGEnabled  bool     `json:"mig_enabled"`
	// MIGMode is how the scheduler partitions a MIG-enabled GPU:
	// MIGStatic (only the instances that exist) or MIGDynamic (it may plan
	// instances to create; the node destroys them after the job). Empty
	// for a GPU without MIG.
	MIGMode string `json:"mig_mode,omitempty"`
	// MIGProfiles is the GPU's profile table (with MIG on).
	MIGProfiles []MIGProfile `json:"mig_profiles,omitempty"`
	// MIGSlices is the GPU's MIG layout: the instances the node reported
	// and, in the controller's view, the slices jobs hold (with the job).
	MIGSlices []MIGSlice `json:"mig_slices,omitempty"`
	// CDIName is the fully qualified CDI device name the node injects
	// ("nvidia.com/gpu=GPU-...").
	CDIName string `json:"cdi_name,omitempty"`
	// Health is "ok" or why the GPU is out of service. gpud's own
	// health model writes "gpud:<code> gpu<index> <detail>"
	// ("gpud:xid79 gpu3 XID 79 GPU has fallen off the bus"); it lifts
	// only such marks itself (after a clean probe), a person's never.
	Health string `json:"health,omitempty"`
	// Serial is the board serial number: the GPU's identity in health
	// history and RMA reports ("" when NVML does not tell).
	Serial string `json:"serial,omitempty"`
	// NICs are the active RDMA NICs closest to the GPU: under its PCIe
	// switch, else on its NUMA node.
	NICs []string `json:"nics,omitempty"`
}

// RDMAPaired is Resources.RDMA for "the NICs paired with my GPUs".
const RDMAPaired = -1

// NIC is an RDMA device of a node.
type NIC struct {
	Name     string `json:"name"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	NUMANode int    `json:"numa_node"`
	// Switch identifies the PCIe switch the NIC is behind ("" if none).
	Switch string `json:"switch,omitempty"`
	// Active: a port is ACTIVE and user-space verbs are available.
	Active  bool   `json:"active"`
	CDIName string `json:"cdi_name,omitempty"`
	// Health is "" or why the NIC is out of service: gpud's health
	// checks write "gpud:nic-down mlx5_0 ..." and lift only such marks
	// (after a clean probe). Jobs that need RDMA avoid a NIC out of
	// service; the node's other work goes on.
	Health string `json:"health,omitempty"`
}

// NICProblem is an RDMA NIC a node agent found unhealthy: its link down,
// or its port error counters climbing.
type NICProblem struct {
	Name string `json:"name"`
	// Problem says what is wrong ("gpud:nic-down mlx5_0 port 1 DOWN").
	Problem string `json:"problem"`
}

// GPUProblem is a GPU a node agent found unhealthy (over a health limit
// of node.toml's [health] for the sustain time, or a fatal XID/ECC error).
type GPUProblem struct {
	UUID string `json:"uuid"`
	// GPU is the parent GPU's UUID when UUID names a MIG instance (a
	// drain-slice finding: only that instance goes out).
	GPU string `json:"gpu,omitempty"`
	// Problem says what is wrong ("gpud:temp gpu3 temperature 91C at or
	// above 85C for 1m0s").
	Problem string `json:"problem"`
	// Code, Class and Action are the health model's triage of it
	// (gpud/health): "xid79", "fatal", "drain-gpu". Action
	// "drain-node" takes the whole node out; empty means drain-gpu.
	Code   string `json:"code,omitempty"`
	Class  string `json:"class,omitempty"`
	Action string `json:"action,omitempty"`
}

// GPUEvent is one entry of a GPU's health history: a finding of the
// node's health model, a probe, a readmission. Nodes report them with
// their heartbeats; accounting keeps them by GPU serial.
type GPUEvent struct {
	Time Time   `json:"time"`
	Node string `json:"node"`
	// GPU is the GPU's index on the node.
	GPU    int    `json:"gpu"`
	UUID   string `json:"uuid"`
	Serial string `json:"serial,omitempty"`
	// Kind is GPUEventFault, GPUEventProbeFailed, GPUEventReadmit or
	// GPUEventDiag.
	Kind   string `json:"kind"`
	Code   string `json:"code,omitempty"`
	Class  string `json:"class,omitempty"`
	Action string `json:"action,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// GPU event kinds.
const (
	// GPUEventFault is a finding (drained or only recorded: see Action).
	GPUEventFault = "fault"
	// GPUEventProbeFailed: a readmission probe found the GPU still bad.
	GPUEventProbeFailed = "probe-failed"
	// GPUEventReadmit: a clean probe put the GPU back in service.
	GPUEventReadmit = "readmit"
	// GPUEventDiag: a background diagnostic of an idle GPU passed (one
	// that fails is a fault with code diag-failed).
	GPUEventDiag = "diag"
	// GPUEventResume: a person put the GPU back (gpuq resume).
	GPUEventResume = "resume"
)

// Inventory is what a node agent registers.
type Inventory struct {
	Name string `json:"name"`
	Addr string `json:"addr,omitempty"`
	// StepPort is where the agent's step listener serves on Addr (0:
	// none; the agent has no node certificate).
	StepPort int      `json:"step_port,omitempty"`
	CPUs     int      `json:"cpus"`
	MemMiB   int64    `json:"mem_mib"`
	GPUs     []GPU    `json:"gpus"`
	NICs     []NIC    `json:"nics,omitempty"`
	Features []string `json:"features,omitempty"`
	// Version of the agent binary, for gpuq nodes.
	Version string `json:"version,omitempty"`
	// CRIU is "ok" when `criu check` passes on the node, else why it
	// cannot checkpoint processes with CRIU ("" from agents that do not
	// say).
	CRIU string `json:"criu,omitempty"`
}

// Node is a node as the controller shows it.
type Node struct {
	Inventory
	State         NodeState `json:"state"`
	Reason        string    `json:"reason,omitempty"`
	LastHeartbeat Time      `json:"last_heartbeat"`
	Partitions    []string  `json:"partitions,omitempty"`
	// Allocated resources, derived from the jobs placed on the node.
	AllocCPUs   int      `json:"alloc_cpus"`
	AllocMemMiB int64    `json:"alloc_mem_mib"`
	AllocGPUs   []string `json:"alloc_gpus"`
	Jobs        []JobID  `json:"jobs,omitempty"`
	// Weight orders nodes for placement (scontrol update Weight=; lower
	// first); 0 is the default.
	Weight int `json:"weight,omitempty"`
	// CachedImages counts the images in the node's image cache as its
	// last report said (scontrol show node). Only the count: which
	// images a node holds tells which images its users run.
	CachedImages int `json:"cached_images,omitempty"`
	// Power is the node's power-saving state ("" powered on; power.go).
	Power PowerState `json:"power,omitempty"`
	// PowerSince is when the node entered Power (zero when on).
	PowerSince Time `json:"power_since,omitzero"`
}

// MIG modes of a GPU (GPU.MIGMode).
const (
	MIGStatic  = "static"
	MIGDynamic = "dynamic"
)

// MIGPlacement is where a MIG instance sits on its GPU: memory slices
// [Start, Start+Size).
type MIGPlacement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Overlaps reports whether p and q share a memory slice.
func (p MIGPlacement) Overlaps(q MIGPlacement) bool {
	return p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

// MIGProfile is a GPU-instance profile a MIG-mode GPU offers.
type MIGProfile struct {
	// Name as nvidia-smi spells it ("1g.10gb").
	Name string `json:"name"`
	// Slices is the number of compute slices.
	Slices int   `json:"slices"`
	MemMiB int64 `json:"mem_mib"`
	// MaxCount is how many instances fit on an empty GPU.
	MaxCount int `json:"max_count"`
	// Placements are every placement an instance may take.
	Placements []MIGPlacement `json:"placements"`
}

// MIGSlice is one MIG instance on a GPU: one that exists, or (in a plan)
// one the node creates before the job starts.
type MIGSlice struct {
	// GPU is the parent GPU's UUID.
	GPU       string       `json:"gpu"`
	Profile   string       `json:"profile"`
	Placement MIGPlacement `json:"placement"`
	// UUID is the MIG device UUID once the instance exists.
	UUID string `json:"uuid,omitempty"`
	// Job holds the slice (in the controller's node view); 0 when idle.
	Job JobID `json:"job,omitempty"`
	// Health is "" or why the instance is out of service (a fault NVML
	// attributed to it alone: "gpud:xid94 gpu3 ..."); the GPU's other
	// instances keep scheduling. gpud lifts only its own marks, after a
	// clean probe.
	Health string `json:"health,omitempty"`
}
