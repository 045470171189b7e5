package spec

// JobID identifies a job for its whole life, across requeues.
type JobID uint64

// JobState uses Slurm's state names; scripts compare against them.
type JobState string

// Job states.
const (
	StatePending     JobState = "PENDING"
	StateRunning     JobState = "RUNNING"
	StateSuspended   JobState = "SUSPENDED"
	StateCompleting  JobState = "COMPLETING"
	StateCompleted   JobState = "COMPLETED"
	StateFailed      JobState = "FAILED"
	StateCancelled   JobState = "CANCELLED"
	StateTimeout     JobState = "TIMEOUT"
	StatePreempted   JobState = "PREEMPTED"
	StateNodeFail    JobState = "NODE_FAIL"
	StateOutOfMemory JobState = "OUT_OF_MEMORY"
	StateRequeued    JobState = "REQUEUED"
)

// AllJobStates lists every state, in the order gpuq documents them.
var AllJobStates = []JobState{
	StatePending, StateRunning, StateSuspended, StateCompleting, StateCompleted,
	StateFailed, StateCancelled, StateTimeout, StatePreempted, StateNodeFail,
	StateOutOfMemory, StateRequeued,
}

// Terminal reports whether a job in state s will never run again.
func (s JobState) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCancelled, StateTimeout, StateNodeFail, StateOutOfMemory:
		return true
	}
	return false
}

// Active reports whether a job in state s holds resources on nodes.
func (s JobState) Active() bool {
	return s == StateRunning || s == StateCompleting || s == StateSuspended
}

// Pending reasons, shown by gpuq like squeue's REASON column.
const (
	ReasonNone        = "None"
	ReasonPriority    = "Priority"
	ReasonResources   = "Resources"
	ReasonReservation = "Reservation"
	// ReasonReservedMaint: the job's time limit crosses a maintenance
	// reservation on the nodes it fits (Slurm's words).
	ReasonReservedMaint = "ReqNodeNotAvail, Reserved for maintenance"
	// ReasonReservationDeleted: the job's --reservation is gone.
	ReasonReservationDeleted       = "ReservationDeleted"
	ReasonDependency               = "Dependency"
	ReasonDependencyNeverSatisfied = "DependencyNeverSatisfied"
	ReasonQOSLimit                 = "QOSLimit"
	ReasonAccountLimit             = "AccountLimit"
	ReasonPartitionDown            = "PartitionDown"
	ReasonBeginTime                = "BeginTime"
	ReasonHeld                     = "JobHeldUser"
	ReasonHeldAdmin                = "JobHeldAdmin"
	ReasonNodeDown                 = "NodeDown"
	ReasonBadConstraints           = "BadConstraints"
	// ReasonJobArrayTaskLimit: the array already runs its %MAX tasks.
	ReasonJobArrayTaskLimit = "JobArrayTaskLimit"
	// Access rules a queued job breaks since a reload (Slurm's names):
	// its account or its user's groups are not allowed in its partition,
	// its QOS is not, its account no longer lists its user (or is gone),
	// its QOS is gone or not allowed for its account.
	ReasonAccountNotAllowed = "AccountNotAllowed"
	ReasonQOSNotAllowed     = "QOSNotAllowed"
	ReasonInvalidAccount    = "InvalidAccount"
	ReasonInvalidQOS        = "InvalidQOS"
)

// Resources is what a job asks for on each of its nodes. A job with
// Nodes > 1 is a gang: every node gets the same per-node request, all or none.
type Resources struct {
	Nodes int `json:"nodes"`
	// MaxNodes is the top of sbatch -N MIN-MAX (Nodes is MIN): the job
	// starts on as many nodes as fit now within the range; 0 (or
	// Nodes) is a fixed count.
	MaxNodes    int   `json:"max_nodes,omitempty"`
	CPUsPerNode int   `json:"cpus_per_node"`
	MemMiB      int64 `json:"mem_mib_per_node"`
	// MemWholeNode is Slurm's --mem=0: all the memory of each node (MemMiB
	// is then 0). A node whose memory is partly allocated cannot take it.
	MemWholeNode bool `json:"mem_whole_node,omitempty"`
	// GPUsPerNode whole GPUs on each node, of GPUModel when set ("h100").
	GPUsPerNode int    `json:"gpus_per_node"`
	GPUModel    string `json:"gpu_model,omitempty"`
	// GPUProfile asks for MIG slices of this profile ("1g.10gb") instead of
	// whole GPUs; GPUsPerNode then counts slices.
	GPUProfile string `json:"gpu_profile,omitempty"`
	// GPUFraction asks for a share of one non-MIG GPU (0 < f < 1).
	GPUFraction float64 `json:"gpu_fraction,omitempty"`
	// TotalGPUs is -G/--gpus: GPUs across all nodes. The controller turns it
	// into GPUsPerNode when Nodes is known.
	TotalGPUs int `json:"total_gpus,omitempty"`
	// RDMA asks for RDMA NICs on each node: RDMAPaired for the NICs
	// paired with the job's GPUs, N > 0 for N NICs (nearest the GPUs
	// first); 0 for none.
	RDMA       int      `json:"rdma,omitempty"`
	Exclusive  bool     `json:"exclusive,omitempty"`
	NodeList   []string `json:"nodelist,omitempty"`
	Exclude    []string `json:"exclude,omitempty"`
	Constraint string   `json:"constraint,omitempty"`
}

// JobSpec is what a user submits: everything gpusubmit learned from the
// command line and the script's directives. Identity (user, uid, gid) is
// not part of it; the server takes it from the connection.
type JobSpec struct {
	Name string `json:"name"`
	// Partition, QOS and Account are always present in JSON: gpuq's
	// contract lists them, and the controller fills defaults at submit.
	Partition string    `json:"partition"`
	QOS       string    `json:"qos"`
	Account   string    `json:"account"`
	Resources Resources `json:"resources"`
	TimeLimit Duration  `json:"time_limit"`
	// TimeUnlimited is --time=UNLIMITED (or 0): the job sets no limit of
	// its own, so it gets its partition's maximum (none if the partition
	// has none) instead of the partition's default.
	TimeUnlimited bool `json:"time_unlimited,omitempty"`
	// Script is the batch script's text; Args follow it on its command line.
	Script string   `json:"script"`
	Args   []string `json:"args,omitempty"`
	// Env is the environment the job starts with (after --export handling),
	// as KEY=VALUE strings.
	Env []string `json:"env,omitempty"`
	// WorkDir is the job's working directory (-D, else the submit dir).
	WorkDir   string `json:"work_dir"`
	SubmitDir string `json:"submit_dir"`
	// SubmitHost is the host the job was submitted from, as its client
	// saw its name (SLURM_SUBMIT_HOST); "" when unknown.
	SubmitHost string `json:"submit_host,omitempty"`
	// Output and Error are file patterns (%j %x %u %a %A %N %%), relative to
	// WorkDir unless absolute. Empty Error means stderr goes with stdout.
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
	// Image is "host" (the node's root filesystem, read-only) or an image
	// reference known to the node's containerd.
	Image string `json:"image,omitempty"`
	// Container holds pyxis's --container-* options (nil: none).
	Container *Container `json:"container,omitempty"`
	Hold      bool       `json:"hold,omitempty"`
	Nice      int        `json:"nice,omitempty"`
	BeginTime Time       `json:"begin_time"`
	Requeue   bool       `json:"requeue"`
	// RequeueExpedite (--requeue=expedite): requeued by a hardware fault,
	// the job goes ahead of every other job.
	RequeueExpedite bool     `json:"requeue_expedite,omitempty"`
	Array           string   `json:"array,omitempty"`
	Depend          string   `json:"dependency,omitempty"`
	Signal          string   `json:"signal,omitempty"`
	Ckpt            Duration `json:"checkpoint_interval,omitempty"`
	// CkptMode is how the job is checkpointed: "" (cooperative, the
	// default) or CkptModeCRIU.
	CkptMode string `json:"checkpoint_mode,omitempty"`
	Comment  string `json:"comment,omitempty"`
	// Tasks is the job's task layout as sbatch gave it (--ntasks,
	// --ntasks-per-node, --cpus-per-task, --gpus-per-task); steps use it.
	// Zero values mean not given.
	Tasks Tasks `json:"tasks,omitzero"`
	// OpenMode is how the output files are opened: "" or OpenTruncate
	// (the default) or OpenAppend (--open-mode=append).
	OpenMode string `json:"open_mode,omitempty"`
	// WCKey is the workload characterisation key (--wckey), kept for
	// accounting.
	WCKey string `json:"wckey,omitempty"`
	// Interactive makes the job an allocation for steps from outside
	// (srun or salloc on a login host): no batch script runs, every node
	// holds its share until the allocation is released (cancelled) or
	// its time is up.
	Interactive bool `json:"interactive,omitempty"`
	// Reservation is the advance reservation the job runs in
	// (--reservation): only on its nodes, in its windows.
	Reservation string `json:"reservation,omitempty"`
	// TimeMin (--time-min) lets the scheduler start the job with less
	// than TimeLimit, at least TimeMin, where that fits a backfill hole;
	// TimeLimit then becomes what it got.
	TimeMin Duration `json:"time_min,omitempty"`
}

// HetComponent is one component of a heterogeneous job as its nodes see
// it (api.Assignment.Het): what the SLURM_*_HET_GROUP_N variables say.
type HetComponent struct {
	Offset    int    `json:"offset"`
	JobID     JobID  `json:"job_id"`
	AllocID   string `json:"alloc_id,omitempty"`
	Partition string `json:"partition"`
	Account   string `json:"account,omitempty"`
	QOS       string `json:"qos,omitempty"`
	// Nodes are the component's allocation in rank order (empty while it
	// has none).
	Nodes []NodeAlloc `json:"nodes,omitempty"`
	Tasks Tasks       `json:"tasks,omitzero"`
	// GPUIndex are the node's numbers (nvidia-smi's) of the component's
	// whole GPUs on its first node (SLURM_JOB_GPUS_HET_GROUP_N).
	GPUIndex []int `json:"gpu_index,omitempty"`
}

// Tasks is a job's task layout (JobSpec.Tasks).
type Tasks struct {
	NTasks        int `json:"ntasks,omitempty"`
	NTasksPerNode int `json:"ntasks_per_node,omitempty"`
	CPUsPerTask   int `json:"cpus_per_task,omitempty"`
	GPUsPerTask   int `json:"gpus_per_task,omitempty"`
}

// Output open modes (JobSpec.OpenMode).
const (
	OpenTruncate = "truncate"
	OpenAppend   = "append"
)

// Checkpoint modes of JobSpec.CkptMode.
const (
	CkptModeCooperative = "cooperative"
	CkptModeCRIU        = "criu"
)

// Job is a submitted job as the controller keeps and shows it.
type Job struct {
	ID JobID `json:"id"`
	JobSpec
	User  string   `json:"user"`
	UID   uint32   `json:"uid"`
	GID   uint32   `json:"gid"`
	State JobState `json:"state"`
	// Reason is why a pending job waits, or why an ended one ended.
	Reason     string `json:"reason"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"exit_signal,omitempty"`
	Priority   int64  `json:"priority"`
	SubmitTime Time   `json:"submit_time"`
	StartTime  Time   `json:"start_time"`
	EndTime    Time   `json:"end_time"`
	// SuspendTime is when a SUSPENDED job was suspended (scontrol
	// suspend), or a resumed one last was; Suspended is the time it has
	// spent suspended in all, by which its time limit was extended.
	SuspendTime Time     `json:"suspend_time,omitzero"`
	Suspended   Duration `json:"suspended,omitempty"`
	// Attempt counts starts: 0 before the first, 1 while the first runs,
	// and so on across requeues.
	Attempt int `json:"attempt"`
	// HWRequeues counts the requeues a hardware fault caused (a GPU or
	// node taken out by gpud's health model, a failed node): not charged
	// to the job, so not among scontrol's Restarts.
	HWRequeues int `json:"hw_requeues,omitempty"`
	// Expedited: requeued by a hardware fault with expedite on, the job
	// waits at top priority until it starts again.
	Expedited bool `json:"expedited,omitempty"`
	// ArrayJobID is the ID of the array this job is a task of (Slurm's
	// %A, SLURM_ARRAY_JOB_ID), 0 for a job that is not an array task;
	// ArrayTaskID is its index in the array (%a, SLURM_ARRAY_TASK_ID).
	ArrayJobID  JobID `json:"array_job_id,omitempty"`
	ArrayTaskID int   `json:"array_task_id,omitempty"`
	// HetJobID is the id of the heterogeneous job this job is a component
	// of (its component 0, the leader; Slurm's HetJobId), 0 for a job that
	// is not one; HetOffset is its component number (Slurm's
	// HetJobOffset: squeue shows HetJobID+HetOffset) and HetSize the
	// number of components. The components start together or not at all.
	HetJobID  JobID `json:"het_job_id,omitempty"`
	HetOffset int   `json:"het_offset,omitempty"`
	HetSize   int   `json:"het_size,omitempty"`
	// Nodes and GPUs describe the current (or last) allocation: node names,
	// and the allocated devices' UUIDs (MIG UUIDs for slices).
	Nodes []string `json:"nodes"`
	GPUs  []string `json:"gpus"`
	Alloc *Alloc   `json:"alloc,omitempty"`
	// StopState, when set, is the controller's request that the running
	// allocation stop and end in this state (CANCELLED, REQUEUED, ...), with
	// StopReason; persisted so a controller restart does not forget it.
	StopState  JobState `json:"stop_state,omitempty"`
	StopReason string   `json:"stop_reason,omitempty"`
	// StopCheckpoint asks the node to checkpoint the job (signal, wait
	// for the seal) before it carries out the stop in StopState.
	StopCheckpoint bool `json:"stop_checkpoint,omitempty"`
	// Checkpoints counts the sealed checkpoints nodes reported, over all
	// attempts; LastCheckpoint is the newest of them.
	Checkpoints    int           `json:"checkpoints,omitempty"`
	LastCheckpoint CheckpointRef `json:"last_checkpoint,omitzero"`
	// LostWork is the compute the latest requeue threw away: from the
	// newest sealed checkpoint (or the attempt's start, without one) to
	// the requeue.
	LostWork Duration `json:"lost_work,omitempty"`
	// StdoutPath and StderrPath are the resolved output files.
	StdoutPath string `json:"stdout_path,omitempty"`
	StderrPath string `json:"stderr_path,omitempty"`
	// ExpectedStart is the scheduler's estimate for a pending job.
	ExpectedStart Time `json:"expected_start"`
	// Partitions are the partitions of sbatch -p a,b that could ever run
	// the job, in the order given, when it listed more than one: the
	// scheduler starts it in whichever of them can start it first (Slurm's
	// rule), and Partition becomes that one. Empty for a job of one
	// partition.
	Partitions []string `json:"partitions,omitempty"`
	// NodeReasons says, for a pending job, why each node does not run it
	// now, counted per reason: "10 nodes: 6 insufficient free h100 GPUs,
	// 3 constraint ib, 1 drain". The scheduling cycle counts it for every
	// job it could not place (sched.PlacementMetric); for another pending
	// job shown alone (gpuq show) it is counted when asked. Not kept
	// across a controller restart.
	NodeReasons string `json:"node_reasons,omitempty"`
	// SignalAlloc, SignalName and SignalSeq are the latest signal a user
	// asked for (scancel --signal): the node delivers SignalName once per
	// SignalSeq to the allocation SignalAlloc only, so a requeued attempt
	// never receives its predecessor's signal.
	SignalAlloc string `json:"signal_alloc,omitempty"`
	SignalName  string `json:"signal_name,omitempty"`
	SignalSeq   int    `json:"signal_seq,omitempty"`
	// IdleGPU is set while the running job's GPUs have stayed below its
	// idle-GPU policy's utilisation for the policy's time ("below 5% for
	// 30 min"); cleared when they get busy again. gpuq shows it.
	IdleGPU string `json:"idle_gpu,omitempty"`
	// ImagePull is how far a pull of the job's image is while one runs
	// on a node: the job's own pull before its task starts (RUNNING), or
	// a prefetch while it waits (PENDING). From the nodes' heartbeats;
	// shown (squeue %r, scontrol show job), cleared when the pull ends.
	ImagePull *ImagePull `json:"image_pull,omitempty"`

	// IdempotencyKey is the Idempotency-Key of the submission that made
	// the job (a client's random name for one submission): a resend with
	// the same key by the same user returns this job instead of making
	// another. Stored with the job, so an HA group's new leader knows it.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// SignalTarget is who gets SignalName: "" or SignalFull every process,
	// SignalSteps the steps' tasks, SignalBatch the batch shell only.
	SignalTarget string `json:"signal_target,omitempty"`
	// Notices are the latest scontrol notify messages (the newest
	// MaxNotices); NoticeSeq numbers them. The batch node of the
	// allocation a notice names appends it to the job's stderr once.
	Notices   []JobNotice `json:"notices,omitempty"`
	NoticeSeq int         `json:"notice_seq,omitempty"`
	// Steps are the current attempt's steps: the batch step and each
	// srun, running and ended (the newest maxKeptSteps ended ones); ended
	// steps are in accounting as well.
	Steps []Step `json:"steps,omitempty"`
	// StepSignals are the latest step signal and cancel requests (gpuq
	// cancel N.S); StepSignalSeq numbers them.
	StepSignals   []StepSignal `json:"step_signals,omitempty"`
	StepSignalSeq int          `json:"step_signal_seq,omitempty"`
	// Interrupted is the run a node's silence ended, kept while the job
	// waits to start again: the node (every node of the run) was marked
	// DOWN for missed heartbeats and the job requeued, but its containers
	// may still run there. A node that comes back reporting that
	// allocation, before the job started again, resumes the run instead
	// of having it fenced (docs/ha.md). Cleared when the job starts or ends.
	Interrupted *InterruptedRun `json:"interrupted,omitempty"`
}

// InterruptedRun is what a requeue for node silence took off a job
// (Job.Interrupted): enough to put the run back as it was.
type InterruptedRun struct {
	Alloc       Alloc        `json:"alloc"`
	Nodes       []string     `json:"nodes"`
	GPUs        []string     `json:"gpus"`
	StartTime   Time         `json:"start_time"`
	IdleGPU     string       `json:"idle_gpu,omitempty"`
	LostWork    Duration     `json:"lost_work,omitempty"`
	Steps       []Step       `json:"steps,omitempty"`
	StepSignals []StepSignal `json:"step_signals,omitempty"`
	// At is when the run was interrupted (the job requeued).
	At Time `json:"at"`
}

// CheckpointRef identifies a sealed checkpoint of a job as its node
// reported it: the attempt that wrote it, its sequence number in the job's
// checkpoint directory (ckpt-<seq>), when it was sealed and its size.
type CheckpointRef struct {
	Attempt int   `json:"attempt"`
	Seq     int   `json:"seq"`
	Time    Time  `json:"time"`
	Bytes   int64 `json:"bytes"`
}

// Alloc is one attempt's placement of a job: which nodes, which devices.
// Its ID is unique across attempts so a node never confuses a requeued
// job's new run with its old one.
type Alloc struct {
	ID        string      `json:"id"`
	JobID     JobID       `json:"job_id"`
	Attempt   int         `json:"attempt"`
	Nodes     []NodeAlloc `json:"nodes"`
	StartTime Time        `json:"start_time"`
}

// NodeAlloc is the part of an allocation on one node.
type NodeAlloc struct {
	Node string `json:"node"`
	Rank int    `json:"rank"`
	// Addr is the node's registered address (spec.Inventory.Addr), so
	// every rank can reach rank 0 (MASTER_ADDR); empty means use Node.
	Addr string `json:"addr,omitempty"`
	// StepPort is the port of the node's step listener (spec.Inventory
	// StepPort; 0: none): steps reach its agent at Addr:StepPort.
	StepPort int   `json:"step_port,omitempty"`
	CPUs     int   `json:"cpus"`
	MemMiB   int64 `json:"mem_mib"`
	// GPUs are device UUIDs (MIG UUIDs for slices).
	GPUs []string `json:"gpus,omitempty"`
	// GPUFraction is set for a shared-GPU allocation (one entry in GPUs).
	GPUFraction float64 `json:"gpu_fraction,omitempty"`
	// MIG lists the MIG slices of a MIG job (GPUs is then empty): the node
	// reuses an existing instance at each placement or creates one.
	MIG []MIGSlice `json:"mig,omitempty"`
	// NICs are the RDMA NICs ("mlx5_0") the job uses on the node. NICs
	// are shared: the scheduler picks, it does not reserve them.
	NICs []string `json:"nics,omitempty"`
	// Ended is the controller's record that this node's part has exited
	// (or its node failed): its resources are free again. A job holds
	// resources while any part of its current Alloc has not ended.
	Ended bool `json:"ended,omitempty"`
	// PullMS and PullBytes are what making the job's image ready cost
	// this part before its task started: the wait for the pull (for a
	// cached image, the registry's check of the user's access) and the
	// bytes downloaded for it (0 when the cache held the image, or
	// another job's pull brought it); 0 and 0 on the host's root.
	PullMS    int64 `json:"pull_ms,omitempty"`
	PullBytes int64 `json:"pull_bytes,omitempty"`
}

// ImagePull is a pull of a job's image under way on one of its nodes.
type ImagePull struct {
	Node string `json:"node"`
	// Done and Total are bytes of the image's blobs (Total 0 until the
	// registry sent the manifest).
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// Prefetch is true for a pull ahead of the pending job.
	Prefetch bool `json:"prefetch,omitempty"`
}

// Percent is how far p is, 0-100 (0 while Total is unknown).
func (p *ImagePull) Percent() int {
	if p.Total <= 0 {
		return 0
	}
	return int(min(p.Done*100/p.Total, 100))
}
