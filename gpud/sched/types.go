package sched

import (
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Snapshot is the scheduler's immutable view of the cluster for one cycle.
// The controller owns the data; Schedule never modifies it.
type Snapshot struct {
	// ID identifies the snapshot in logs when a cycle panics.
	ID    uint64
	Nodes []Node
	// Jobs are the pending jobs, in any order: Schedule sorts them.
	Jobs []Job
}

// Node is one node's capacity and what is still free on it.
type Node struct {
	Name  string
	State spec.NodeState
	// Features are matched by a job's Constraint.
	Features []string
	// Partitions the node belongs to.
	Partitions []string
	CPUs       int
	FreeCPUs   int
	MemMiB     int64
	FreeMemMiB int64
	GPUs       []GPU
	// Allocs counts the allocations running on the node; an exclusive job
	// needs a node with none.
	Allocs int
}

// GPU is one schedulable GPU device: a whole GPU or (for a MIG-aware
// scheduler) a MIG slice or a shareable GPU.
type GPU struct {
	UUID  string
	Model string
	// Free is false when a whole-GPU allocation holds it.
	Free bool
	// MIGEnabled GPUs are not handed out whole.
	MIGEnabled bool
	// Profile is the MIG profile when this entry is a slice ("1g.10gb");
	// empty for a whole GPU.
	Profile string
	// FreeFraction is the unallocated share of a shared GPU (1 when idle).
	FreeFraction float64
	// Healthy is false when the node reports a problem with the device.
	Unhealthy bool
}

// Job is a pending job as the scheduler sees it.
type Job struct {
	ID         spec.JobID
	Partition  string
	Priority   int64
	SubmitTime time.Time
	BeginTime  time.Time
	Held       bool
	// PartitionDown jobs wait with ReasonPartitionDown.
	PartitionDown bool
	// Req is the per-node request, already normalised by the controller
	// (Nodes ≥ 1, CPUsPerNode ≥ 1, TotalGPUs folded into GPUsPerNode).
	Req spec.Resources
}

// Config tunes a cycle.
type Config struct {
	// MaxStartsPerCycle bounds the work of one cycle; 0 means no bound.
	MaxStartsPerCycle int
}

// Plan is what a cycle decided.
type Plan struct {
	Starts  []Start
	Pending []Pending
}

// Start places a job. Nodes are in rank order.
type Start struct {
	JobID spec.JobID
	Nodes []spec.NodeAlloc
}

// Pending says why a job waits. Detail is a short human explanation.
type Pending struct {
	JobID  spec.JobID
	Reason string
	Detail string
}
