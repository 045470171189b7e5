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
	// CDIName is the fully qualified CDI device name the node injects
	// ("nvidia.com/gpu=GPU-...").
	CDIName string `json:"cdi_name,omitempty"`
	// Health is "ok" or what is wrong ("XID 79", "temperature 91C").
	Health string `json:"health,omitempty"`
}

// GPUProblem is a GPU a node agent found unhealthy (over a health limit
// of node.toml's [health] for the sustain time, or a fatal XID/ECC error).
type GPUProblem struct {
	UUID string `json:"uuid"`
	// Problem says what is wrong ("temperature 91C above 85C for 1m0s").
	Problem string `json:"problem"`
}

// Inventory is what a node agent registers.
type Inventory struct {
	Name     string   `json:"name"`
	Addr     string   `json:"addr,omitempty"`
	CPUs     int      `json:"cpus"`
	MemMiB   int64    `json:"mem_mib"`
	GPUs     []GPU    `json:"gpus"`
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
}
