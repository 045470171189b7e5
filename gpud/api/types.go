package api

import (
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// ControllersResponse is GET /v1/controllers: the members of the
// controller group and the leader. A single controller (no [ha]) lists
// itself as the leader.
type ControllersResponse struct {
	// Leader is the ID of the member that is leader, "" during an election.
	Leader  string             `json:"leader"`
	Members []ControllerMember `json:"members"`
	// Self is the ID of the member that answered: its own row holds its
	// term and indices (the others' are known to them).
	Self string `json:"self,omitempty"`
}

// ControllerMember is one controller as the answering member sees it.
type ControllerMember struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address,omitempty"`
	APIAddress  string `json:"api_address"`
	// State is leader, follower, candidate, or unreachable (a member the
	// answering one cannot reach).
	State string `json:"state"`
	// Voter is false for a non-voting member catching up.
	Voter        bool   `json:"voter"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// LastContact is the leader's last contact with this member (RFC 3339),
	// "" for the leader itself or when unknown.
	LastContact string `json:"last_contact,omitempty"`
}

// JobFilter selects jobs for GET /v1/jobs. Zero fields match everything;
// with no States, pending and active jobs are listed (like squeue).
type JobFilter struct {
	IDs        []spec.JobID    `json:"ids,omitempty"`
	Users      []string        `json:"users,omitempty"`
	Accounts   []string        `json:"accounts,omitempty"`
	Partitions []string        `json:"partitions,omitempty"`
	States     []spec.JobState `json:"states,omitempty"`
	// All includes ended jobs the controller still remembers.
	All bool `json:"all,omitempty"`
	// View is how much of each job comes back (query view=): ViewFull
	// (the default) or ViewBrief.
	View string `json:"view,omitempty"`
}

// Job list views (GET /v1/jobs?view=).
const (
	// ViewFull lists each job as spec.Job encodes, less its Script, Args
	// and Env (GET /v1/jobs/{id} has those).
	ViewFull = ""
	// ViewBrief lists only what a queue table shows, zero values omitted
	// (spec.Job.AppendBriefJSON): the gpuq --json contract fields, the
	// GPU ask and the expected start. Other fields decode as zero.
	ViewBrief = "brief"
)

// JobsResponse is GET /v1/jobs.
type JobsResponse struct {
	Jobs []spec.Job `json:"jobs"`
}

// JobActionRequest is POST /v1/jobs/{id}/{cancel|hold|release|requeue|complete}.
type JobActionRequest struct {
	Reason string `json:"reason,omitempty"`
	// Signal, for cancel, sends this signal instead of ending the job
	// (scancel --signal); empty means cancel.
	Signal string `json:"signal,omitempty"`
	// SignalTarget, with Signal, says who gets it (spec.SignalSteps,
	// SignalBatch, SignalFull); empty means every process of the job.
	SignalTarget string `json:"signal_target,omitempty"`
	// Step, for cancel, names one step of the job ("0", "1", ...): the
	// step is cancelled (or, with Signal, signalled) and the job runs on.
	Step string `json:"step,omitempty"`
	// ExitCode and ExitSignal, for complete, are the exit status of the
	// work in an srun or salloc allocation (the step's, the command's).
	ExitCode   int `json:"exit_code,omitempty"`
	ExitSignal int `json:"exit_signal,omitempty"`
}

// NodesResponse is GET /v1/nodes.
type NodesResponse struct {
	Nodes []spec.Node `json:"nodes"`
}

// NodeActionRequest is POST /v1/nodes/{name}/{drain|resume}.
type NodeActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// TokenRequest is POST /v1/token (scontrol token): a token for the caller
// itself, for Slurm's REST clients (X-SLURM-USER-TOKEN).
type TokenRequest struct {
	// Lifespan in seconds; 0 means Slurm's default, 1800.
	Lifespan int64 `json:"lifespan,omitempty"`
}

// TokenResponse is the token POST /v1/token issued.
type TokenResponse struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// ReconfigureResponse is POST /v1/reconfigure.
type ReconfigureResponse struct {
	Message string `json:"message"`
}

// JoinRequest is POST /v1/nodes/join: a node agent with the cluster's
// join token asks for a client certificate for its name. It is the one
// call over TCP that needs no bearer token or certificate.
type JoinRequest struct {
	// Node and JoinToken; Client.Join also sends the token in the
	// JoinTokenHeader header, which the controller checks before it
	// reads the body.
	Node      string `json:"node"`
	JoinToken string `json:"join_token"`
	// CSR is a PEM certificate request with CommonName Node.
	CSR string `json:"csr"`
}

// JoinTokenHeader carries a join request's token (see JoinRequest).
const JoinTokenHeader = "X-Gpud-Join-Token"

// JoinResponse carries the node's certificate and the CA (both PEM).
type JoinResponse struct {
	Cert string `json:"cert"`
	CA   string `json:"ca"`
}

// RegisterRequest is POST /v1/nodes/register, sent by a node agent at start
// and whenever its inventory changes.
type RegisterRequest struct {
	Inventory spec.Inventory `json:"inventory"`
	// Revocations is the version of the revocation lists the node holds
	// (Revocations.Version; an agent before them sends none).
	Revocations string `json:"revocations,omitempty"`
	// Running lists the allocation IDs the agent has live containers
	// for, as HeartbeatRequest.Running (nil: an agent that does not
	// say): a run the node's silence interrupted resumes as the node
	// comes back, before a new attempt of its job can start.
	Running []string `json:"running,omitempty"`
}

// Revocations is the cluster's revocation state as the controller sends
// it to a node with every answer it polls for (registration, heartbeat,
// assignments): always the version, and the lists when the node said it
// holds another version. A node that has not had its version confirmed
// for longer than its bound (90 % of node_timeout) refuses its peers and
// step tickets.
type Revocations struct {
	Version string           `json:"version"`
	Lists   *RevocationLists `json:"lists,omitempty"`
}

// RevocationLists are the revoked credentials: certificate serials
// (lowercase hex) and token IDs (jti).
type RevocationLists struct {
	Certs  []string `json:"certs"`
	Tokens []string `json:"tokens"`
}

// RegisterResponse tells the agent how often to heartbeat.
type RegisterResponse struct {
	HeartbeatIntervalSec int `json:"heartbeat_interval_sec"`
	// NodeTimeoutMS is the controller's node_timeout: a node silent this
	// long is marked DOWN and its jobs requeued elsewhere, so an agent
	// out of touch this long stops sealing checkpoints (self-fencing).
	// 0 from a controller that does not say.
	NodeTimeoutMS int64 `json:"node_timeout_ms,omitempty"`
	// Revocations: see Revocations.
	Revocations *Revocations `json:"revocations,omitempty"`
	// GPUsOut are the node's GPUs that gpud's health model took out of
	// service (Problem is the mark): a restarted agent probes them before
	// they come back.
	GPUsOut []spec.GPUProblem `json:"gpus_out,omitempty"`
	// ControllerID is the controller's identity (ControllerID doc).
	ControllerID string `json:"controller_id,omitempty"`
}

// HeartbeatResponse answers a heartbeat (NodeTimeoutMS as in
// RegisterResponse, so a reloaded node_timeout reaches the agents).
type HeartbeatResponse struct {
	NodeTimeoutMS int64        `json:"node_timeout_ms,omitempty"`
	Revocations   *Revocations `json:"revocations,omitempty"`
	// Prefetch lists the images of pending jobs that the last full
	// scheduling cycle expects to start on this node (backfill
	// reservations), soonest first: the node pulls them into its cache
	// while the jobs wait.
	Prefetch []Prefetch `json:"prefetch,omitempty"`
	// Prepare lists the single-node batch jobs that the last full
	// scheduling cycle expects to start on this node next (backfill
	// reservations: the head of the queue once running jobs end, the next
	// tasks of an array), soonest first, at most a few; sent only to a node
	// whose heartbeat said Prepares. The node prepares a container for each
	// (node.toml prepared_containers) and destroys it when a later answer
	// no longer lists the job.
	Prepare []Expected `json:"prepare,omitempty"`
	// ImagesVersion is the version of the node's image inventory the
	// controller holds (ImageInventory.Version; "" for none): the node
	// sends its inventory again when its own differs.
	ImagesVersion string `json:"images_version,omitempty"`
	// Ended names the directories of the heartbeat's Sealed whose
	// checkpoints no job will restart from: their job ended for good
	// (a terminal state: never requeued), or the controller knows no job
	// of the ID (purged, or a reset state's) or knows it under another
	// tag. The node removes each once older than its
	// checkpoint_retention. An older controller sends none: nothing is
	// removed.
	Ended []CkptDir `json:"ended,omitempty"`
	// Sealed says the controller takes HeartbeatRequest.Sealed: the node
	// sends its list only after an answer said so (an older controller
	// refuses a field it does not know, failing the heartbeat).
	Sealed bool `json:"sealed,omitempty"`
}

// MaxNodeImages bounds an image inventory: a node with more cached
// images reports the most recently used.
const MaxNodeImages = 512

// MaxPulls bounds the pulls one heartbeat reports.
const MaxPulls = 256

// ImageInventory is the images in a node's cache (spec.ImageKey names),
// for the scheduler to prefer nodes that hold a job's image. The
// controller keeps it in memory only and shows it to no user: which
// images a node holds says which images its users run.
type ImageInventory struct {
	// Version identifies Images (a hash of them): equal versions, equal
	// lists.
	Version string   `json:"version"`
	Images  []string `json:"images"`
}

// PullProgress is how far a job's image pull on the node is: the job's
// own pull before it starts, or a prefetch while it waits.
type PullProgress struct {
	Job spec.JobID `json:"job"`
	// Done and Total are bytes of the image's blobs (Total 0 until the
	// manifest is read).
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// Prefetch is true for a pull ahead of a pending job.
	Prefetch bool `json:"prefetch,omitempty"`
}

// Prefetch is one pending job's image for a node to pull ahead of the
// job. The pull runs with the job user's own credentials, as the job's
// own pull would.
type Prefetch struct {
	Job   spec.JobID `json:"job"`
	Image string     `json:"image"`
	UID   uint32     `json:"uid"`
	GID   uint32     `json:"gid"`
	// Start is when the job is expected to start.
	Start spec.Time `json:"start"`
}

// Expected is a pending job the controller expects to start on the node,
// with what the node needs to make the container the job's start would
// make: the job as it would be assigned (its script and environment left
// out: the start brings them) and its planned part on the node (the GPUs,
// CPUs and memory the reservation holds). The planned GPUs may differ
// from those the start gets; the node then starts the job cold.
type Expected struct {
	Job  spec.Job       `json:"job"`
	Node spec.NodeAlloc `json:"node"`
	// Start is when the job is expected to start at the latest.
	Start spec.Time `json:"start"`
}

// HeartbeatRequest is POST /v1/nodes/{name}/heartbeat. Running lists the
// allocation IDs the agent has live containers for.
type HeartbeatRequest struct {
	Running []string `json:"running"`
	// GPUProblems lists the node's GPUs that are unhealthy now; the
	// controller takes each out of service and moves its jobs away.
	GPUProblems []spec.GPUProblem `json:"gpu_problems,omitempty"`
	// GPUEvents are the health events since the last answered heartbeat
	// (findings, probes, readmissions), for the GPUs' history; a
	// readmission puts a GPU that gpud took out back in service.
	GPUEvents []spec.GPUEvent `json:"gpu_events,omitempty"`
	// NICReport says the agent checks its RDMA NICs' health: NICProblems
	// is then the whole list of NICs it holds out of service (an empty
	// list readmits every NIC gpud took out).
	NICReport   bool              `json:"nic_report,omitempty"`
	NICProblems []spec.NICProblem `json:"nic_problems,omitempty"`
	// Revocations is the version of the revocation lists the node holds.
	Revocations string `json:"revocations,omitempty"`
	// Images is the node's image inventory, sent when it differs from
	// the one the controller holds (HeartbeatResponse.ImagesVersion);
	// nil: unchanged.
	Images *ImageInventory `json:"images,omitempty"`
	// Pulls are the image pulls under way on the node for jobs.
	Pulls []PullProgress `json:"pulls,omitempty"`
	// Prepares says the node prepares containers for the jobs the
	// controller expects to place on it (HeartbeatResponse.Prepare).
	Prepares bool `json:"prepares,omitempty"`
	// Sealed lists job directories in the node's checkpoint root (with
	// a sealed checkpoint or not) that have no runner of their job on
	// the node, oldest first, at most MaxSealed; sent every few minutes while
	// there are any. The controller answers with those it may remove
	// (HeartbeatResponse.Ended). Sent only to a controller whose last
	// answer said it takes it (HeartbeatResponse.Sealed).
	Sealed []CkptDir `json:"sealed,omitempty"`
}

// MaxSealed bounds HeartbeatRequest.Sealed.
const MaxSealed = 256

// CkptDir is a job's checkpoint directory on a node: the job's ID and
// the directory's tag (checkpoint.JobTag: the job's submit time; "" for
// an untagged one).
type CkptDir struct {
	Job spec.JobID `json:"job"`
	Tag string     `json:"tag,omitempty"`
}

// Assignment is the controller's desired state for one allocation on one
// node. The node agent reconciles towards the full set: it starts what it
// does not run, stops what is marked Stop, and kills any container whose
// allocation is absent (fencing a job that was requeued elsewhere).
type Assignment struct {
	Job   spec.Job   `json:"job"`
	Alloc spec.Alloc `json:"alloc"`
	// Stop asks the node to end the allocation and report StopState
	// (CANCELLED, PREEMPTED, REQUEUED, ...) with StopReason.
	Stop       bool          `json:"stop,omitempty"`
	StopState  spec.JobState `json:"stop_state,omitempty"`
	StopReason string        `json:"stop_reason,omitempty"`
	// Signal, when set, asks the node to deliver this signal once
	// (identified by SignalSeq so a repeated watch does not resend it).
	Signal    string `json:"signal,omitempty"`
	SignalSeq int    `json:"signal_seq,omitempty"`
	// Checkpoint, with Stop, asks the node to checkpoint the job first:
	// send its checkpoint signal, wait (bounded) for the job to finish
	// and seal the checkpoint, and only then stop it.
	Checkpoint bool `json:"checkpoint,omitempty"`
	// MPIDefault is the site's srun --mpi when a step names none
	// (gpud.toml [controller] mpi_default, Slurm's MpiDefault).
	MPIDefault string `json:"mpi_default,omitempty"`
	// ClusterName is the cluster's name (SLURM_CLUSTER_NAME).
	ClusterName string `json:"cluster_name,omitempty"`
	// Gate is the check of the job's GPUs before it starts on the node:
	// "quick" (the node's health model judges a fresh reading) or "off";
	// "" (an older controller) is "off".
	Gate string `json:"gate,omitempty"`
	// Het are the components of the heterogeneous job Job is a component
	// of, in offset order (nil for another job): the SLURM_*_HET_GROUP_N
	// variables, and where srun --het-group runs a step.
	Het []spec.HetComponent `json:"het,omitempty"`
}

// AssignmentsResponse is GET /v1/nodes/{name}/assignments?after=GEN&wait=SECONDS&revocations=VERSION:
// a long poll that returns once the node's generation exceeds after, when
// the revocation lists are not (or no longer) at VERSION, or when wait
// elapses (with the unchanged set).
type AssignmentsResponse struct {
	Generation uint64 `json:"generation"`
	// Delta says this answer is a delta line of a watch stream asked with
	// deltas (watch=1&deltas=1; api.Client.WatchAssignments asks): it
	// carries what changed since generation Base, the generation of the
	// stream's line before it. Assignments are then only the allocations
	// added or changed since Base (each whole, with its job), Removed the
	// IDs of those no longer listed; every other allocation is as the
	// line before had it. A stream's first line is the whole set (Delta
	// false). A node applies a delta only onto the set of generation Base
	// it holds from the same stream, and otherwise asks again (a new
	// stream, whose first line is the whole set). Answers to a long poll,
	// and every line of a stream asked without deltas, are whole sets.
	Delta bool `json:"delta,omitempty"`
	// Base is the generation a delta line applies to (0 when omitted).
	Base        uint64       `json:"base,omitempty"`
	Assignments []Assignment `json:"assignments"`
	// Removed are the allocation IDs a delta line drops from the set.
	Removed []string `json:"removed,omitempty"`
	// Revocations: see Revocations (with revocations=VERSION asked).
	Revocations *Revocations `json:"revocations,omitempty"`
	// StepTicketKey is the public key (Ed25519, base64url) the node's
	// step listener verifies step tickets with (srun outside the job's
	// containers; see StepHello); empty from a controller that issues
	// none.
	StepTicketKey string `json:"step_ticket_key,omitempty"`
	// Now is the controller's wall clock as it answered. The node takes
	// each allocation's start time (stamped on the controller's clock)
	// as that long before it received the answer, on its own clock: a
	// node whose clock differs from the controller's, or was stepped,
	// measures a time limit from the true start, not from a start an
	// hour in its future or past (zero: a controller that does not say;
	// the start is taken as it is).
	Now time.Time `json:"now,omitzero"`
	// ControllerID is the identity of the controller's state: made once
	// with its state.db (an HA group's: with the group's replicated state,
	// the same on every member; a restored backup keeps the backup's),
	// new when that state is reset. Allocation IDs name allocations only
	// within one identity: a node agent that sees it change keeps its
	// runners, outbox rows and undelivered events of the old identity
	// away from the new controller's allocations. Empty from a
	// controller that has none (an older gpud).
	ControllerID string `json:"controller_id,omitempty"`
}

// Event kinds a node reports.
const (
	EventStarted = "started"
	EventExited  = "exited"
	// EventCheckpointed reports a sealed checkpoint: CkptSeq, CkptBytes,
	// and Time (when it was sealed).
	EventCheckpointed = "checkpointed"
	// EventUsage carries a usage sample of the allocation (Usage).
	EventUsage = "usage"
	// EventStepStarted and EventStepEnded report a job step (Step) that
	// the node serves: srun's steps, numbered per job.
	EventStepStarted = "step_started"
	EventStepEnded   = "step_ended"
)

// UsageSample is what one allocation used on one node over (Start, End]:
// its GPUs as NVML reads them, its cgroup's CPU time and memory. ID is
// unique per node and allocation and travels with every retry, so the
// controller stores a sample once however often it is delivered.
type UsageSample struct {
	ID      string    `json:"id"`
	Attempt int       `json:"attempt"`
	Start   spec.Time `json:"start"`
	End     spec.Time `json:"end"`
	// GPUs is how many of the allocation's GPUs the readings cover.
	GPUs int `json:"gpus"`
	// GPUUtilAvg and GPUUtilMax are percentages over those GPUs.
	GPUUtilAvg float64 `json:"gpu_util_avg"`
	GPUUtilMax float64 `json:"gpu_util_max"`
	// GPUMemMiB and PowerW are summed over the GPUs (a GPU share counts
	// its fraction of the power); EnergyJ is PowerW over the interval.
	GPUMemMiB float64 `json:"gpu_mem_mib"`
	PowerW    float64 `json:"power_w"`
	EnergyJ   float64 `json:"energy_j"`
	// CPUSeconds is CPU time used in the interval; MemMiB is memory in use
	// at End (both from the job's cgroup; 0 where unreadable).
	CPUSeconds float64 `json:"cpu_seconds"`
	MemMiB     float64 `json:"mem_mib"`
	// MemPeakMiB is the most memory the job's cgroup on the node has used
	// since it started, at End (0 where the kernel keeps no peak): sacct's
	// MaxRSS.
	MemPeakMiB float64 `json:"mem_peak_mib,omitempty"`
}

// AllocEvent is a state change of one allocation on one node. Nodes keep
// events in an outbox until the controller acknowledges them; the
// controller applies them idempotently (by node and Seq, and by state).
type AllocEvent struct {
	Seq     uint64     `json:"seq"`
	Node    string     `json:"node"`
	AllocID string     `json:"alloc_id"`
	JobID   spec.JobID `json:"job_id"`
	Kind    string     `json:"kind"`
	Time    spec.Time  `json:"time"`
	// For EventExited: the job's final state on this node.
	State    spec.JobState `json:"state,omitempty"`
	ExitCode int           `json:"exit_code"`
	Signal   int           `json:"signal,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	// For EventCheckpointed: the sealed checkpoint's sequence number
	// (ckpt-<seq>) and the bytes of the job's files in it.
	CkptSeq   int   `json:"ckpt_seq,omitempty"`
	CkptBytes int64 `json:"ckpt_bytes,omitempty"`
	// For EventStarted: the MIG UUIDs of the node's slices, in the order
	// of its NodeAlloc.MIG (the node creates them, so only it knows).
	MIG []string `json:"mig,omitempty"`
	// For EventStarted: how long the job's start waited for its image
	// and the bytes downloaded for it (spec.NodeAlloc PullMS, PullBytes).
	PullMS    int64 `json:"pull_ms,omitempty"`
	PullBytes int64 `json:"pull_bytes,omitempty"`
	// For EventUsage: the sample.
	Usage *UsageSample `json:"usage,omitempty"`
	// For EventStepStarted and EventStepEnded: the step.
	Step *spec.Step `json:"step,omitempty"`
	// For EventExited (state REQUEUED) before the job started: the GPUs
	// that failed the start gate (Assignment.Gate). The controller takes
	// them out of service and places the job again, not charging it.
	GateFailed []spec.GPUProblem `json:"gate_failed,omitempty"`
}

// EventsRequest is POST /v1/nodes/{name}/events.
type EventsRequest struct {
	Events []AllocEvent `json:"events"`
	// Now is the node's clock (the clock of the events' times) as it
	// sent them. Where it differs from the controller's by over a
	// minute, the controller moves the events' times by the difference:
	// a job that started on a node whose clock is an hour behind did not
	// run an hour already (zero: a node that does not say; taken as they
	// are).
	Now time.Time `json:"now,omitzero"`
	// ControllerID is the identity (AssignmentsResponse.ControllerID) of
	// the controller the events were recorded for: a controller with
	// another identity refuses them (409) instead of applying an old
	// allocation's events to its own allocation of the same ID. Empty: a
	// node that does not say (an older agent, or one whose controller
	// gave no identity); such events are taken as before.
	ControllerID string `json:"controller_id,omitempty"`
}

// EventsResponse acknowledges every event up to and including AckedSeq.
type EventsResponse struct {
	AckedSeq uint64 `json:"acked_seq"`
}

// AcctRecord is one job as accounting remembers it (gpuq acct, sacct);
// accounting.Record is this type, so the database's rows and the API's
// cannot drift. AcctJob carries it on the wire.
type AcctRecord struct {
	ID           spec.JobID    `json:"id"`
	Name         string        `json:"name"`
	User         string        `json:"user"`
	UID          uint32        `json:"uid"`
	Account      string        `json:"account"`
	Partition    string        `json:"partition"`
	QOS          string        `json:"qos"`
	State        spec.JobState `json:"state"`
	Reason       string        `json:"reason"`
	ExitCode     int           `json:"exit_code"`
	Signal       int           `json:"exit_signal"`
	SubmitTime   spec.Time     `json:"submit_time"`
	EligibleTime spec.Time     `json:"eligible_time"`
	StartTime    spec.Time     `json:"start_time"`
	EndTime      spec.Time     `json:"end_time"`
	TimeLimit    spec.Duration `json:"time_limit"`
	Nodes        []string      `json:"nodes"`
	// GPUs are the last attempt's device UUIDs (MIG UUIDs for slices).
	GPUs        []string `json:"gpus"`
	GPUCount    int      `json:"gpu_count"`
	GPUModel    string   `json:"gpu_model"`
	GPUProfile  string   `json:"gpu_profile"`
	GPUFraction float64  `json:"gpu_fraction"`
	CPUs        int      `json:"cpus"`
	MemMiB      int64    `json:"mem_mib"`
	Attempts    int      `json:"attempts"`
	WorkDir     string   `json:"work_dir"`
	// ArrayJobID and ArrayTaskID place an array task (sacct's A_T; 0 and
	// 0 outside arrays); WCKey is --wckey and NTasks the task count.
	ArrayJobID  spec.JobID `json:"array_job_id,omitempty"`
	ArrayTaskID int        `json:"array_task_id,omitempty"`
	// HetJobID and HetOffset place a heterogeneous job's component
	// (sacct's JobID N+K): its leader's id and its offset (0 and 0 for
	// other jobs).
	HetJobID  spec.JobID `json:"het_job_id,omitempty"`
	HetOffset int        `json:"het_job_offset,omitempty"`
	WCKey     string     `json:"wckey,omitempty"`
	NTasks    int        `json:"ntasks,omitempty"`
	// Request is the job's request as submitted (per node; nil in
	// records older than it), Dependency its --dependency, Nice its
	// --nice and ArrayMax its array's %MAX (0: none): what gpud simulate
	// --from-accounting needs to replay the job.
	Request    *spec.Resources `json:"request,omitempty"`
	Dependency string          `json:"dependency,omitempty"`
	Nice       int             `json:"nice,omitempty"`
	ArrayMax   int             `json:"array_max,omitempty"`
	// Elapsed is the last attempt's run time in seconds, up to now for a
	// running job (sacct's Elapsed).
	Elapsed int64 `json:"elapsed"`
	// GPUHours and CPUHours sum every attempt, so work lost to a requeue
	// still counts; a running attempt counts up to now.
	GPUHours float64 `json:"gpu_hours"`
	CPUHours float64 `json:"cpu_hours"`
	// SliceHours is MIG slice-hours (a slice counts 1; GPUHours bills its
	// fraction; 0 for whole GPUs and shares). GPUUtil is the mean GPU
	// utilisation (percent) and EnergyKWh the GPUs' energy, from the
	// nodes' usage samples (0 without samples); CO2Kg and Cost follow
	// gpud.toml's [accounting] grid intensity and prices (0 where not
	// configured).
	SliceHours float64 `json:"slice_hours"`
	GPUUtil    float64 `json:"gpu_util"`
	EnergyKWh  float64 `json:"energy_kwh"`
	CO2Kg      float64 `json:"co2_kg"`
	Cost       float64 `json:"cost"`
	// MaxRSSMiB is the last attempt's peak memory on its busiest node
	// (MaxRSSNode), AveRSSMiB the mean of each node's peak: the peak of
	// the job's cgroup on the node (every step's tasks together) as the
	// nodes' usage samples last saw it (0 and "" without samples: a job
	// shorter than a sample interval, or a kernel without memory.peak).
	// sacct's MaxRSS, AveRSS and MaxRSSNode.
	MaxRSSMiB  float64 `json:"max_rss_mib"`
	AveRSSMiB  float64 `json:"ave_rss_mib"`
	MaxRSSNode string  `json:"max_rss_node"`
	// ImagePullSeconds and ImagePullBytes are what the last attempt's
	// container image cost before its task started: the slowest node's
	// wait for it (for a cached image, the registry's check of the
	// user's access) and the bytes its nodes downloaded (0 when cached).
	// sacct's ImagePullTime and ImagePullBytes, gpud's own fields.
	ImagePullSeconds float64 `json:"image_pull_seconds"`
	ImagePullBytes   int64   `json:"image_pull_bytes"`
}

// AcctJob is one job of GET /v1/accounting/jobs: its record (whose fields
// sit at the top of the JSON object) and what the request asked for
// besides.
type AcctJob struct {
	AcctRecord
	// AttemptHistory is every start of the job, oldest first (sacct
	// --duplicates); only when AcctFilter.AttemptHistory asked for it,
	// and then [] for a job that never started.
	AttemptHistory []AcctAttempt `json:"attempt_history,omitzero"`
	// Steps are the last attempt's steps (N.batch, N.0, ...; sacct's step
	// rows); only when AcctFilter.Steps asked for them, and then [] for a
	// job that has none.
	Steps []AcctStep `json:"steps,omitzero"`
	// StepID is set on the rows clients derive from Steps (sacct's
	// N.batch, N.0): the step's ID; the server never sets it.
	StepID string `json:"step_id,omitempty"`
}

// AcctStep is one step of a job in accounting (accounting.Step is this
// type): the step as the controller kept it, and its run time in seconds
// (up to now while it runs).
type AcctStep struct {
	spec.Step
	Elapsed int64 `json:"elapsed"`
}

// AcctAttempt is one start of a job in accounting (accounting.Attempt is
// this type).
type AcctAttempt struct {
	Attempt int    `json:"attempt"`
	AllocID string `json:"alloc_id"`
	// State is REQUEUED for an attempt that was requeued, else the job's
	// state; Reason says why it ended (e.g. "preempted by job 5").
	State     spec.JobState `json:"state"`
	Reason    string        `json:"reason"`
	Nodes     []string      `json:"nodes"`
	CPUs      int           `json:"cpus"`
	MemMiB    int64         `json:"mem_mib"`
	StartTime spec.Time     `json:"start_time"`
	EndTime   spec.Time     `json:"end_time"`
	// Elapsed is the attempt's run time in seconds, up to now while it runs.
	Elapsed int64 `json:"elapsed"`
	// CheckpointSeq and CheckpointTime are the newest sealed checkpoint the
	// attempt wrote (ckpt-<seq>); 0 and null without one.
	CheckpointSeq  int       `json:"checkpoint_seq"`
	CheckpointTime spec.Time `json:"checkpoint_time"`
	// LostWork is the seconds of compute the attempt's requeue threw away,
	// from its checkpoint (or its start); 0 if it was not requeued.
	LostWork int64 `json:"lost_work"`
	// ImagePullSeconds and ImagePullBytes: what the attempt's image cost
	// before its task started (AcctRecord's fields of the same names).
	ImagePullSeconds float64 `json:"image_pull_seconds"`
	ImagePullBytes   int64   `json:"image_pull_bytes"`
}

// AcctFilter selects jobs for GET /v1/accounting/jobs, with sacct's
// semantics: empty lists and zero times match everything; Start and End
// select jobs eligible or running at some instant in [Start, End]. Limit
// caps the number of jobs (the lowest IDs); 0 means no cap. A caller who
// is not root sees only their own jobs.
type AcctFilter struct {
	IDs        []spec.JobID    `json:"ids,omitempty"`
	Users      []string        `json:"users,omitempty"`
	Accounts   []string        `json:"accounts,omitempty"`
	Partitions []string        `json:"partitions,omitempty"`
	States     []spec.JobState `json:"states,omitempty"`
	Start      time.Time       `json:"start,omitzero"`
	End        time.Time       `json:"end,omitzero"`
	Limit      int             `json:"limit,omitempty"`
	// AttemptHistory asks for each job's AttemptHistory too.
	AttemptHistory bool `json:"attempt_history,omitempty"`
	// Steps asks for each job's Steps too.
	Steps bool `json:"steps,omitempty"`
	// Fields, when set, asks for only these fields of each AcctJob (their
	// JSON keys: "state", "nodes", ...; the id always comes), the others
	// left zero: sacct asks for what its columns print, so 100,000 jobs
	// cost that, not every field. Empty asks for every field (gpuq acct).
	Fields []string `json:"fields,omitempty"`
}

// AcctJobsResponse is GET /v1/accounting/jobs.
type AcctJobsResponse struct {
	Jobs []AcctJob `json:"jobs"`
}

// AcctSummaryRow is one group of GET /v1/accounting/summary (gpuq report);
// accounting.SummaryRow is this type.
type AcctSummaryRow struct {
	// Group is the user, account, partition or GPU model.
	Group    string  `json:"group"`
	Jobs     int     `json:"jobs"`
	GPUHours float64 `json:"gpu_hours"`
	CPUHours float64 `json:"cpu_hours"`
	// SliceHours, EnergyKWh, CO2Kg and Cost total the jobs' (see AcctJob),
	// clipped to the window like the hours.
	SliceHours float64 `json:"slice_hours"`
	EnergyKWh  float64 `json:"energy_kwh"`
	CO2Kg      float64 `json:"co2_kg"`
	Cost       float64 `json:"cost"`
	// IdleGPUHours is allocated but idle (sampled under 5% utilisation).
	IdleGPUHours float64 `json:"idle_gpu_hours"`
}

// Group keys of GET /v1/accounting/summary.
const (
	GroupByUser      = "user"
	GroupByAccount   = "account"
	GroupByPartition = "partition"
	GroupByGPUModel  = "gpu_model"
)

// AcctSummaryResponse is GET /v1/accounting/summary: usage in
// [Start, End] grouped by Group, rows ordered by group. Like sreport,
// hours are clipped to the window (a job running across its edge counts
// only its hours inside); gpuq acct reports whole jobs. A caller who is
// not root or an operator gets only their own usage.
type AcctSummaryResponse struct {
	Group string           `json:"group"`
	Start time.Time        `json:"start,omitzero"`
	End   time.Time        `json:"end,omitzero"`
	Rows  []AcctSummaryRow `json:"rows"`
}

// AcctClusterRow is one line of GET /v1/accounting/cluster (gpuq report
// cluster); accounting.ClusterRow is this type. A row with Profile "" is a
// GPU model's total (MIG slices count their share of a GPU); rows with a
// Profile break its MIG use down.
type AcctClusterRow struct {
	Model   string `json:"model"`
	Profile string `json:"profile,omitempty"`
	// GPUs is the model's whole GPUs in the inventory, TotalGPUHours them
	// over the window (0 on profile rows).
	GPUs          int     `json:"gpus"`
	TotalGPUHours float64 `json:"total_gpu_hours"`
	// AllocatedGPUHours is what jobs held; IdleGPUHours the part of it
	// sampled under 5% utilisation; DownGPUHours the hours of GPUs on
	// nodes DOWN or drained.
	AllocatedGPUHours float64 `json:"allocated_gpu_hours"`
	IdleGPUHours      float64 `json:"idle_gpu_hours"`
	DownGPUHours      float64 `json:"down_gpu_hours"`
	// PoweredDownGPUHours are the hours of GPUs on nodes power saving
	// had powered down (node events power_down to power_up; Slurm's
	// sreport "PLND Down"), not counted as down.
	PoweredDownGPUHours float64 `json:"powered_down_gpu_hours,omitempty"`
}

// AcctUtilPoint is one bucket of GET /v1/accounting/cluster's series;
// accounting.UtilPoint is this type.
type AcctUtilPoint struct {
	Time time.Time `json:"time"` // the bucket's start
	// CapacityGPUHours is the inventory's GPUs over the bucket (clipped
	// to the window); Allocated and Down as in AcctClusterRow.
	CapacityGPUHours  float64 `json:"capacity_gpu_hours"`
	AllocatedGPUHours float64 `json:"allocated_gpu_hours"`
	DownGPUHours      float64 `json:"down_gpu_hours"`
}

// AcctClusterResponse is GET /v1/accounting/cluster?start=&end=&bucket=:
// the cluster's GPU-hours by model and MIG profile over [Start, End],
// and the same in buckets of Bucket seconds from Start (for plots).
// Capacity is the GPUs the controller knows now.
type AcctClusterResponse struct {
	Start  time.Time        `json:"start"`
	End    time.Time        `json:"end"`
	Bucket int64            `json:"bucket_seconds"`
	Rows   []AcctClusterRow `json:"rows"`
	Series []AcctUtilPoint  `json:"series"`
	// ReservedIdleGPUHours and MaintIdleGPUHours are the GPU-hours that
	// advance reservations held in the window and their jobs left idle,
	// within the rows' idle hours: of reservations without MAINT (sreport
	// cluster utilization counts them as Allocated, as Slurm) and of MAINT
	// ones (Planned Down); IGNORE_JOBS ones count in neither.
	ReservedIdleGPUHours float64 `json:"reserved_idle_gpu_hours,omitempty"`
	MaintIdleGPUHours    float64 `json:"maint_idle_gpu_hours,omitempty"`
}

// AcctResvRow is one window of a reservation in GET
// /v1/accounting/reservations (sreport reservation utilization): the
// GPU-seconds its jobs used within the window and the reserved ones they
// left idle. TotalSeconds is how long the window held (up to now while
// it holds); Idle is GPUs × TotalSeconds less Allocated, at least 0.
type AcctResvRow struct {
	spec.ResvRecord
	TotalSeconds    int64   `json:"total_seconds"`
	AllocGPUSeconds float64 `json:"alloc_gpu_seconds"`
	IdleGPUSeconds  float64 `json:"idle_gpu_seconds"`
}

// AcctResvResponse is GET /v1/accounting/reservations: the windows that
// held at any time in [Start, End), each whole (as sreport: the period
// picks reservations, it does not cut them).
type AcctResvResponse struct {
	Start time.Time     `json:"start"`
	End   time.Time     `json:"end"`
	Rows  []AcctResvRow `json:"rows"`
}

// LatestUsage is the newest usage sample of a job on a node (GET
// /v1/usage/latest, gpuq top): the UsageSample fields a live view needs.
type LatestUsage struct {
	Node    string     `json:"node"`
	JobID   spec.JobID `json:"job_id"`
	Attempt int        `json:"attempt"`
	End     spec.Time  `json:"end"`
	GPUs    int        `json:"gpus"`
	// GPUUtilAvg and GPUUtilMax are percentages over the job's GPUs on
	// the node; GPUMemMiB and PowerW are summed over them.
	GPUUtilAvg float64 `json:"gpu_util_avg"`
	GPUUtilMax float64 `json:"gpu_util_max"`
	GPUMemMiB  float64 `json:"gpu_mem_mib"`
	PowerW     float64 `json:"power_w"`
}

// LatestUsageResponse is GET /v1/usage/latest: the newest sample of each
// job on each node from the last five minutes, by node and job.
type LatestUsageResponse struct {
	Samples []LatestUsage `json:"samples"`
}

// PriorityFactors are the multifactor priority's factors of one job.
type PriorityFactors struct {
	Age       float64 `json:"age"`
	Fairshare float64 `json:"fairshare"`
	JobSize   float64 `json:"job_size"`
	Partition float64 `json:"partition"`
	QOS       float64 `json:"qos"`
	Nice      float64 `json:"nice"`
}

// JobPriority is one pending job's priority (gpuq prio): Priority is the
// total, the sum of Weighted (rounded); Factors are each normalised to
// [0,1] and Weighted are them times their configured weights. With every
// weight zero the total is the plain priority and the factors are zero.
type JobPriority struct {
	JobID     spec.JobID      `json:"job_id"`
	User      string          `json:"user"`
	Account   string          `json:"account"`
	Partition string          `json:"partition"`
	QOS       string          `json:"qos"`
	Nice      int             `json:"nice"`
	Priority  int64           `json:"priority"`
	Factors   PriorityFactors `json:"factors"`
	Weighted  PriorityFactors `json:"weighted"`
}

// PrioritiesResponse is GET /v1/priorities: every pending job the
// scheduler considers, highest priority first.
type PrioritiesResponse struct {
	Jobs []JobPriority `json:"jobs"`
}

// FairshareRow is one row of GET /v1/fairshare (gpuq share): an account
// (User empty) or a user in it.
type FairshareRow struct {
	Account string `json:"account"`
	User    string `json:"user,omitempty"`
	// Parent is an account's parent account (absent under the root);
	// Depth the row's level below the root (1 for top-level accounts).
	Parent string `json:"parent,omitempty"`
	Depth  int    `json:"depth"`
	// RawShares as configured; NormShares among the siblings.
	RawShares  float64 `json:"raw_shares"`
	NormShares float64 `json:"norm_shares"`
	// RawUsage is billed GPU-seconds undecayed; EffectiveUsage decayed
	// with the half-life; NormUsage is EffectiveUsage over the siblings'.
	RawUsage       float64 `json:"raw_usage"`
	EffectiveUsage float64 `json:"effective_usage"`
	NormUsage      float64 `json:"norm_usage"`
	// LevelFS is NormShares / NormUsage; null when there is no usage
	// (infinite: ranks first).
	LevelFS *float64 `json:"level_fs"`
	// Factor is the Fair Tree factor in [0,1] (users; 0 for accounts).
	Factor float64 `json:"factor"`
}

// FairshareResponse is GET /v1/fairshare: accounts in Fair Tree order,
// each followed by its users.
type FairshareResponse struct {
	Rows []FairshareRow `json:"rows"`
}

// AuditEntry is one state-changing API call as the audit log keeps it
// (gpuq audit): who (uid, name, role) did what (Action: the route pattern
// with its verb, "POST /v1/jobs/{id}/cancel") to what (Target: job IDs, a
// node name), from where (Origin: "unix" or the TCP peer address), and
// how it ended (Result: the HTTP status and "ok" or the error message).
// Summarised is, for the summary of a source's refused calls of one kind
// in one interval, how many it stands for; 0 for a row of one call.
// Its fields match accounting.AuditEntry's (TestAuditEntryMatches).
type AuditEntry struct {
	Time      time.Time `json:"time"`
	ActorUID  uint32    `json:"actor_uid"`
	ActorName string    `json:"actor_name"`
	Role      string    `json:"role"`
	Origin    string    `json:"origin"`
	Action    string    `json:"action"`
	Target    string    `json:"target"`
	Result    string    `json:"result"`
	// Summarised: see above.
	Summarised int `json:"summarised,omitempty"`
}

// AuditFilter selects entries for GET /v1/audit; zero fields select all.
type AuditFilter struct {
	Start, End time.Time
	// Actor is a user name or numeric uid.
	Actor string
	// Action is a substring of the action ("cancel", "/nodes/").
	Action string
	// Limit keeps the newest Limit entries (listed oldest first).
	Limit int
}

// AuditResponse is GET /v1/audit: entries oldest first.
type AuditResponse struct {
	Entries []AuditEntry `json:"entries"`
}

// CancelJobsRequest is POST /v1/jobs/cancel: cancel every job the filter
// matches, in one call and one transaction (scancel -u/-t/-n/-p/-A). The
// filter must name at least one criterion; jobs the caller may not cancel
// are skipped and counted.
type CancelJobsRequest struct {
	Filter JobFilter `json:"filter"`
	// Names and QOS narrow the filter to these job names and QOS.
	Names  []string `json:"names,omitempty"`
	QOS    []string `json:"qos,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// CancelJobsResponse lists the jobs cancelled and how many matching jobs
// were skipped (another user's, or already ending).
type CancelJobsResponse struct {
	Cancelled []spec.JobID `json:"cancelled"`
	Skipped   int          `json:"skipped,omitempty"`
}

// Partition is one partition as GET /v1/partitions shows it (sinfo,
// scontrol show partition).
type Partition struct {
	Name    string `json:"name"`
	Default bool   `json:"default,omitempty"`
	// State is UP, DOWN, DRAIN or INACTIVE.
	State string `json:"state"`
	// DefaultTime and MaxTime are the time limits (0: none).
	DefaultTime spec.Duration `json:"default_time"`
	MaxTime     spec.Duration `json:"max_time"`
	// Nodes are the member nodes registered now, by name.
	Nodes []string `json:"nodes"`
}

// AdminUpdateResponse answers PATCH /v1/nodes and /v1/partitions/{name}:
// the live state's differences from the configuration file (or from
// what nodes registered) that remain, one line each.
type AdminUpdateResponse struct {
	Differences []string `json:"differences"`
}

// PartitionsResponse is GET /v1/partitions.
type PartitionsResponse struct {
	Partitions []Partition `json:"partitions"`
}

// JobUpdateRequest is PATCH /v1/jobs/{id} (scontrol update JobId=N): the
// fields to change; absent ones stay.
type JobUpdateRequest struct {
	TimeLimit *spec.Duration `json:"time_limit,omitempty"`
	Partition *string        `json:"partition,omitempty"`
	QOS       *string        `json:"qos,omitempty"`
	Nice      *int           `json:"nice,omitempty"`
	Name      *string        `json:"name,omitempty"`
	Comment   *string        `json:"comment,omitempty"`
}

// AssocAccount is one account of GET /v1/associations (sacctmgr).
type AssocAccount struct {
	Name          string        `json:"name"`
	Parent        string        `json:"parent,omitempty"`
	Shares        int           `json:"shares"`
	Users         []string      `json:"users"`
	Coordinators  []string      `json:"coordinators,omitempty"`
	MaxGPUs       int           `json:"max_gpus,omitempty"`
	MaxJobs       int           `json:"max_jobs,omitempty"`
	MaxSubmitJobs int           `json:"max_submit_jobs,omitempty"`
	MaxWall       spec.Duration `json:"max_wall,omitempty"`
	MaxGPUHours   float64       `json:"max_gpu_hours,omitempty"`
}

// AssocQOS is one QOS of GET /v1/associations.
type AssocQOS struct {
	Name           string        `json:"name"`
	Priority       int           `json:"priority"`
	Preempt        []string      `json:"preempt,omitempty"`
	PreemptMode    string        `json:"preempt_mode,omitempty"`
	MaxGPUsPerUser int           `json:"max_gpus_per_user,omitempty"`
	MaxJobsPerUser int           `json:"max_jobs_per_user,omitempty"`
	MaxWall        spec.Duration `json:"max_wall,omitempty"`
}

// AssociationsResponse is GET /v1/associations: the accounting
// associations of gpud.toml, read-only (sacctmgr list; admins edit the
// TOML).
type AssociationsResponse struct {
	Accounts       []AssocAccount `json:"accounts"`
	QOS            []AssocQOS     `json:"qos"`
	DefaultAccount string         `json:"default_account,omitempty"`
	DefaultQOS     string         `json:"default_qos,omitempty"`
}

// RMARow is one GPU of the RMA report (GET /v1/health/rma, gpuq health --rma): its faults over the period, by
// board serial (a GPU keeps its serial when moved to another node).
type RMARow struct {
	Serial string `json:"serial"`
	UUID   string `json:"uuid"`
	// Node and GPU are where it was last seen.
	Node string `json:"node"`
	GPU  int    `json:"gpu"`
	// Fatal and Degraded count its faults of each class; ProbesFailed
	// its failed readmission probes; Readmits its readmissions.
	Fatal        int `json:"fatal"`
	Degraded     int `json:"degraded"`
	ProbesFailed int `json:"probes_failed"`
	Readmits     int `json:"readmits"`
	// Codes are its distinct fault codes, most frequent first.
	Codes     []string  `json:"codes"`
	FirstSeen spec.Time `json:"first_seen"`
	LastSeen  spec.Time `json:"last_seen"`
	// Candidate: the GPU should go back to the vendor (RMACandidate).
	Candidate bool   `json:"rma_candidate"`
	Why       string `json:"why,omitempty"`
}

// GPUEventsResponse is GET /v1/health/events: GPU health events, oldest
// first.
type GPUEventsResponse struct {
	Events []spec.GPUEvent `json:"events"`
}

// RMAResponse is GET /v1/health/rma.
type RMAResponse struct {
	GPUs []RMARow `json:"gpus"`
}
