package sched

import (
	"time"

	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
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

	// The fields below are optional; left empty, Schedule is the plain
	// scheduler (no reservations, no preemption, no limits).

	// Running jobs hold what their nodes' Free fields already exclude; their
	// expected ends (Start + TimeLimit) build the backfill profile, and they
	// are the preemption candidates.
	Running []RunningJob
	// QOS definitions by name (jobs name theirs in Job.QOS).
	QOS []QOS
	// Partitions give the priority tier and maximum time.
	Partitions []Partition
	// Accounts and Usage feed fairshare; Fairshare, when set, is a report
	// the controller computed (and may cache) and replaces them.
	Accounts  fairshare.Tree
	Usage     []fairshare.Usage
	Fairshare *fairshare.Report
	// AccountLimits cap accounts across every QOS (jobs wait with
	// ReasonAccountLimit); accounts not listed have none.
	AccountLimits []AccountLimit
	// Workload is the expected mix of requests the fgd placement weighs
	// fragmentation against; empty, it is taken from the pending and
	// running jobs of the snapshot.
	Workload []Demand
	// AdvanceReservations keep nodes for the jobs that ask for them
	// (advres.go).
	AdvanceReservations []AdvanceReservation
}

// AccountLimit is one account's limits; 0 means none. Running jobs and
// GPUs are counted from Running (a MIG slice or GPU share counts as one
// GPU, as for QOS limits).
type AccountLimit struct {
	Account string
	MaxGPUs int
	MaxJobs int
	MaxWall time.Duration
	// MaxGPUHours is a GPU-hour budget (like Slurm's GrpTRESMins); the
	// controller fills UsedGPUHours from accounting. A job waits once the
	// budget is spent or when its own GPUs × time limit would overrun it.
	MaxGPUHours  float64
	UsedGPUHours float64
}

// Demand is one kind of request in a workload mix, with its share of the
// arrivals (weights need not sum to 1).
type Demand struct {
	// GPUs whole GPUs, or Fraction (0 < Fraction < 1) of one GPU.
	GPUs     int
	Fraction float64
	CPUs     int
	MemMiB   int64
	Model    string
	Weight   float64
}

// RunningJob is a job holding resources now.
type RunningJob struct {
	ID spec.JobID
	// Nodes with the devices, CPUs and memory held on each.
	Nodes []spec.NodeAlloc
	Start time.Time
	// TimeLimit 0 means none: its resources are never expected back.
	TimeLimit time.Duration
	Priority  int64
	QOS       string
	Account   string
	User      string
	Partition string
	// LastCheckpoint is zero when the job never checkpointed.
	LastCheckpoint time.Time
}

// QOS is a quality of service: a priority, limits and what it preempts.
type QOS struct {
	Name     string
	Priority int64
	// Preempt lists the QOS this one may preempt (each must have a lower
	// Priority); PreemptMode is preempt.ModeRequeue, ModeCancel or
	// ModeCheckpoint ("" = requeue).
	Preempt     []string
	PreemptMode string
	// Limits over the running jobs in this QOS; 0 means none.
	MaxGPUsPerUser    int
	MaxJobsPerUser    int
	MaxGPUsPerAccount int
	MaxJobsPerAccount int
	MaxWall           time.Duration
}

// Partition is a partition's scheduling policy (its node set is on the
// nodes).
type Partition struct {
	Name    string
	Tier    int
	MaxTime time.Duration
	// Placement chooses nodes and GPUs for the partition's jobs; ""
	// means Config.Placement.
	Placement Placement
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
	// NICs are the node's active RDMA NICs (rdma.go).
	NICs []NIC
	// Allocs counts the allocations running on the node; an exclusive job
	// needs a node with none.
	Allocs int
	// Weight orders nodes that fit a job equally well: lower first
	// (scontrol update Weight=); 0 is the default.
	Weight int
	// Images are the images in the node's cache (spec.ImageKey names):
	// among nodes equally good for a job, those holding its image come
	// first (image.go). Never modified once in a snapshot.
	Images map[string]bool
	// Power is the node's power-saving state: a node that is not on
	// runs nothing now; PlanPower (power.go) plans pending work on the
	// powered-down ones, which powers them up.
	Power spec.PowerState
	// IdleSince is when the node last held an allocation (or came up),
	// for PlanPower's idle suspension; zero when unknown.
	IdleSince time.Time
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
	// NUMANode is the GPU's NUMA node (-1 or 0 when unknown).
	// NVLinkGroup numbers the GPUs joined by NVLink/NVSwitch on the node:
	// GPUs with the same positive group talk over NVLink; 0 means none.
	// A multi-GPU job gets its GPUs inside one group, else one NUMA node,
	// when it can.
	NUMANode    int
	NVLinkGroup int
	// MIG is set for a MIG-enabled GPU: its profile table and layout.
	MIG *MIGGPU
	// NICs are the RDMA NICs paired with the GPU (same PCIe switch, else
	// NUMA node).
	NICs []string
}

// Job is a pending job as the scheduler sees it.
type Job struct {
	ID        spec.JobID
	Partition string
	// Alternatives are further partitions the job may start in (Slurm's
	// sbatch -p a,b), in the order given: a job that cannot start now in
	// Partition starts in the first of them that can start it now, and the
	// Start says which. Partition gives its priority tier, limits and
	// reservation; the controller lists only partitions that are up and
	// admit the job's time limit.
	Alternatives []string
	// alt marks a copy of a job placed in one of its Alternatives.
	alt      bool
	Priority int64
	// Expedite puts the job ahead of every other (ExpeditePriority on
	// top of its own): it was requeued by a hardware fault and asked for
	// --requeue=expedite (Slurm 25.11's expedited requeue).
	Expedite   bool
	SubmitTime time.Time
	BeginTime  time.Time
	Held       bool
	// Ineligible is a pending reason the controller gives a job that may
	// not run as it stands (an access rule it breaks since a reload:
	// spec.ReasonAccountNotAllowed, ...); it waits with it and
	// IneligibleDetail, and blocks no other job.
	Ineligible, IneligibleDetail string
	// PartitionDown jobs wait with ReasonPartitionDown.
	PartitionDown bool
	// Req is the per-node request, already normalised by the controller
	// (Nodes ≥ 1, CPUsPerNode ≥ 1, TotalGPUs folded into GPUsPerNode).
	Req spec.Resources

	Account string
	User    string
	QOS     string
	Nice    int
	// TimeLimit 0 means none (the job never ends as far as backfill knows).
	TimeLimit time.Duration
	// TimeMin (--time-min) lets a job that does not fit now for its
	// TimeLimit start for less, at least TimeMin: the longest whole
	// minutes that fit (Start.TimeLimit says what it got).
	TimeMin time.Duration
	// The controller resolves dependencies: DependencyPending jobs wait
	// with ReasonDependency, DependencyNeverSatisfied ones with
	// ReasonDependencyNeverSatisfied; neither blocks other jobs.
	DependencyPending        bool
	DependencyNeverSatisfied bool
	// AwaitingVictims: the job preempted jobs that are still stopping; it
	// waits for what they free and preempts no more meanwhile. It keeps
	// its QOS (priority, limits) in every other way.
	AwaitingVictims bool
	// Reservation is the advance reservation the job asks for
	// (--reservation): it runs only on its nodes, in its windows.
	Reservation string
	// Groups are its owner's group names (primary and supplementary) as
	// last seen, for a reservation's Groups= (nil: unknown).
	Groups []string
	// Image is the job's image as spec.ImageKey names it ("" for the
	// host's root): a tie-breaker towards nodes that hold it (image.go).
	Image string
	// HetJobID, when set, makes the job component HetOffset of the
	// heterogeneous job HetJobID of HetSize components (het.go): all of
	// them start in the same cycle or none does. The controller gives
	// them whole GPUs only, in one partition, outside reservations.
	HetJobID  spec.JobID
	HetOffset int
	HetSize   int
}

// Config tunes a cycle.
type Config struct {
	// MaxStartsPerCycle bounds the work of one cycle; 0 means no bound.
	MaxStartsPerCycle int

	// Priority: all weights zero keeps Job.Priority as given.
	Priority  priority.Config
	Fairshare fairshare.Config
	// BackfillDepth is how many blocked jobs (in priority order) get a
	// reservation; 0 means all. BackfillWindow is how far ahead a
	// reservation may start; 0 means no limit.
	BackfillDepth  int
	BackfillWindow time.Duration
	// PreemptMinRuntime protects a job from preemption until it has run
	// this long. CheckpointGrace is how long a checkpoint-mode victim gets
	// before it is stopped; the preemptor's reservation starts after it.
	PreemptMinRuntime time.Duration
	CheckpointGrace   time.Duration
	// Placement is the default of partitions that set none; "" is
	// PlacePack.
	Placement Placement
}

// Plan is what a cycle decided.
type Plan struct {
	Starts  []Start
	Pending []Pending
	// Reservations hold future resources for blocked jobs (backfill) and
	// for preemptors waiting for their victims to stop.
	Reservations []Reservation
	// Preemptions are applied before anything else in the plan.
	Preemptions []Preemption
	// Placement says, for each pending job whose placement failed (not
	// for jobs held back before placement, nor MIG jobs), how many nodes
	// turned it down per reason (filters.go).
	Placement []PlacementMetric
}

// Reservation is where and when a pending job is expected to start. End is
// zero for a job without a time limit.
type Reservation struct {
	JobID      spec.JobID
	Nodes      []spec.NodeAlloc
	Start, End time.Time
}

// Preemption stops Victim (by Mode) so that Preemptor can start.
type Preemption struct {
	Victim    spec.JobID
	Preemptor spec.JobID
	Mode      string
	Reason    string
}

// Start places a job. Nodes are in rank order.
type Start struct {
	JobID spec.JobID
	Nodes []spec.NodeAlloc
	// Partition is set when the job starts in one of its Alternatives:
	// the partition it runs in. "" means Job.Partition.
	Partition string
	// Backfilled is set when the job starts while a reservation is held
	// for another job (in a full cycle, always one ordered before it): it
	// starts only because it does not delay that job
	// (gpud_backfill_starts_total counts these).
	Backfilled bool
	// TimeLimit is set when the job starts with less than its own limit
	// (Job.TimeMin): its new limit.
	TimeLimit time.Duration
}

// Pending says why a job waits. Detail is a short human explanation.
type Pending struct {
	JobID  spec.JobID
	Reason string
	Detail string
	// ExpectedStart is the job's reservation start, zero when unknown.
	ExpectedStart time.Time
}
