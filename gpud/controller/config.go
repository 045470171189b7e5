package controller

import (
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched"
)

// Partition states.
const (
	PartitionUp = "UP"
	// PartitionDown accepts jobs but starts none.
	PartitionDown = "DOWN"
	// PartitionDrain refuses new jobs and still starts queued ones.
	PartitionDrain = "DRAIN"
	// PartitionInactive refuses new jobs and starts none.
	PartitionInactive = "INACTIVE"
)

// Config is the controller's own configuration; gpud main maps the TOML
// [controller] section onto it.
type Config struct {
	Partitions []Partition
	QOS        []QOS
	// DefaultQOS is applied to jobs that name none ("normal").
	DefaultQOS string
	// DefaultAccount is charged for jobs that name no account (-A).
	DefaultAccount string
	// NodeTimeout: a node silent this long is marked DOWN and its jobs
	// fail or requeue.
	NodeTimeout time.Duration
	// FailoverNodeGrace is how long a controller that just took the lead
	// (an HA failover, or a start) waits for a node it has not heard from
	// before it marks it DOWN, when longer than NodeTimeout: the agents
	// must first find it (Nomad's failover_heartbeat_ttl). Default 2m.
	FailoverNodeGrace time.Duration
	// MinJobAge: an ended job accounting holds is purged from memory and
	// the store this long after its end (purge.go); 0 keeps every job.
	MinJobAge time.Duration
	// HeartbeatInterval is what registering nodes are told to use.
	HeartbeatInterval time.Duration
	// SchedInterval is the period of the background scheduling cycle;
	// events (submit, job end, node change) trigger cycles sooner.
	SchedInterval time.Duration
	// AllowRootJobs lets uid 0 submit jobs.
	AllowRootJobs bool
	// MPIDefault is srun's --mpi where a step names none, sent to the
	// nodes with each assignment (Slurm's MpiDefault).
	MPIDefault string
	// ClusterName is the cluster's name ([auth] cluster_name), sent with
	// each assignment for SLURM_CLUSTER_NAME and shown by scontrol show
	// config.
	ClusterName string
	// MaxNodesPerJob bounds --nodes (default 1024).
	MaxNodesPerJob int

	// Accounts is the fairshare tree ([[account]]): shares among the
	// accounts and the users listed in each (gpuq share).
	Accounts []Account
	// FairshareHalfLife decays past usage ([fairshare] decay_half_life);
	// 0 means no decay.
	FairshareHalfLife time.Duration
	// FairshareModelWeights bills a GPU-second of a model ([fairshare]
	// gpu_model_weights); models not listed weigh 1.
	FairshareModelWeights map[string]float64

	// Priority is the multifactor job priority; all weights zero keeps
	// the plain rule (QOS priority first, then nice).
	Priority PriorityWeights
	// BackfillDepth is how many blocked jobs, in priority order, get a
	// reservation (an expected start) each cycle: 0 means the default
	// 100, negative means all. Reserving for every blocked job is far too
	// slow on a big queue (see gpud/sched/README.md), as in Slurm's
	// bf_max_job_test.
	BackfillDepth int
	// BackfillWindow is how far ahead a reservation may start; 0 means
	// no limit.
	BackfillWindow time.Duration
	// PreemptMinRuntime protects a running job from preemption until it
	// has run this long.
	PreemptMinRuntime time.Duration
	// CheckpointGrace is how long a victim of a checkpoint-mode preemption
	// is expected to take to checkpoint and stop; its preemptor's
	// reservation starts after it.
	CheckpointGrace time.Duration
	// MaxStartsPerCycle bounds the jobs one cycle starts (0: no bound); a
	// cycle that reaches it asks for the next at once.
	MaxStartsPerCycle int
	// SecretEnv lists the site's secret environment variables (names, or
	// prefixes ending in '*'): dropped from every job's environment at
	// submission, like the GPUD_* credentials (spec.SecretEnv).
	SecretEnv []string

	// Privacy is [privacy] (privacy.go): what users see of each other.
	Privacy Privacy

	// MaxSubmitBytes caps what one submission stores (submitSize): its
	// payload once plus each task's record; 0 means no cap.
	MaxSubmitBytes int64
	// MaxSubmitJobsPerUser caps a user's pending + running jobs (array
	// tasks count) where the job's QOS and account set no
	// MaxSubmitJobsPerUser; 0 means no cap. root is not capped.
	MaxSubmitJobsPerUser int
	// MaxSubmitBytesPerUser caps what a user's pending + running jobs
	// store: each plain job's or array's payload once, and each job's
	// record; 0 means no cap. root is not capped.
	MaxSubmitBytesPerUser int64
	// Power is power saving and CLOUD nodes (power.go).
	Power PowerConfig
}

// Defaults of the submission limits (gpud.toml [limits]).
const (
	DefaultMaxSubmitBytes        = 64 << 20
	DefaultMaxSubmitJobsPerUser  = 10000
	DefaultMaxSubmitBytesPerUser = 1 << 30
)

// PriorityWeights are Slurm's multifactor weights: each factor is
// normalised to [0,1] and multiplied by its weight. Nice always counts
// one point per unit (as in Slurm) once any weight is set.
type PriorityWeights struct {
	Age, Fairshare, JobSize, Partition, QOS int64
	// MaxAge is the queue time at which the age factor reaches 1
	// (0: 7 days).
	MaxAge time.Duration
}

// Preempt modes of a QOS.
const (
	// PreemptRequeue stops the victim and queues it again (PREEMPTED,
	// then PENDING with the same id and submit time).
	PreemptRequeue = "requeue"
	// PreemptCancel stops the victim for good (CANCELLED).
	PreemptCancel = "cancel"
	// PreemptCheckpoint asks a checkpointing victim to checkpoint first,
	// then requeues it.
	PreemptCheckpoint = "checkpoint"
	// PreemptOff (or empty) preempts nothing.
	PreemptOff = "off"
)

const defaultBackfillDepth = 100

// Partition is a named set of nodes with limits.
type Partition struct {
	Name string
	// Nodes lists member node names; empty means every node.
	Nodes   []string
	Default bool
	// DefaultTime is the time limit of jobs that give none; MaxTime the
	// largest allowed (0: unlimited).
	DefaultTime time.Duration
	MaxTime     time.Duration
	// PriorityTier feeds the partition factor of job priority.
	PriorityTier int
	// RequeueExpedite: jobs requeued by a hardware fault go first, as
	// with --requeue=expedite.
	RequeueExpedite bool
	// StartGate is the check of a job's GPUs on the node before it
	// starts there: StartGateQuick ("" too) or StartGateOff.
	StartGate string
	// Placement chooses nodes and GPUs ("": sched.PlacePack).
	Placement sched.Placement
	// State is one of PartitionUp (default when empty), PartitionDown,
	// PartitionDrain, PartitionInactive.
	State string
	// Idle is the idle-GPU policy of the partition's jobs.
	Idle IdlePolicy
	// Access rules (access.go): the accounts, groups (names) and QOSes
	// whose jobs may use the partition; empty lists allow all. An allow
	// list and its deny list are not both set (gpud/config refuses it).
	AllowAccounts, DenyAccounts []string
	AllowGroups                 []string
	AllowQOS, DenyQOS           []string
	// Hidden partitions and their jobs are shown only to operators and
	// to users the access rules let use them.
	Hidden bool
}

// Start gates (Partition.StartGate).
const (
	StartGateQuick = "quick"
	StartGateOff   = "off"
)

// Idle actions (IdlePolicy.Action).
const (
	IdleFlag   = "flag"
	IdleHook   = "hook"
	IdleCancel = "cancel"
)

// IdlePolicy acts on a running job whose GPUs all stay below GPUUtil
// percent for After, judged on the nodes' usage samples. An empty Action
// is no policy.
type IdlePolicy struct {
	GPUUtil float64
	After   time.Duration
	// Action is IdleFlag (mark the job), IdleHook (mark it and run Hook
	// once) or IdleCancel (run Hook, if any, and cancel the job).
	Action string
	// Hook is a program and its arguments; the job id, user and reason
	// are appended (see WithIdleHook).
	Hook []string
}

// QOS is a quality of service; Priority orders jobs (higher first).
type QOS struct {
	Name     string
	Priority int
	// Preempt lists the QOSes (of lower Priority) whose running jobs this
	// QOS's jobs may stop to start; PreemptMode says how (PreemptRequeue
	// when empty).
	Preempt     []string
	PreemptMode string
	// Limits over a user's running jobs in this QOS and on each job's
	// time limit; 0 means none.
	MaxGPUsPerUser int
	MaxJobsPerUser int
	MaxWall        time.Duration
	// MaxSubmitJobsPerUser caps a user's pending + running jobs in this
	// QOS (refused at submit), replacing Config.MaxSubmitJobsPerUser for
	// them; 0 means the Config's applies.
	MaxSubmitJobsPerUser int
	// Idle is the idle-GPU policy of the QOS's jobs; when its Action is
	// set it wins over the partition's.
	Idle IdlePolicy
}

// DefaultFailoverNodeGrace is FailoverNodeGrace's default: four
// node_timeouts. An agent finds a dead connection to a deposed leader
// within two heartbeat intervals (10 s) and reaches the new one at once;
// the rest is room for a large fleet's reconnections (each a TLS
// handshake). Nomad's default is 5m. What it costs: a node that died
// during a failover is marked DOWN, and its jobs requeued, up to 2m after
// the failover instead of 30 s after its last heartbeat.
const DefaultFailoverNodeGrace = 2 * time.Minute

// DefaultConfig returns a config with one default partition "batch" over
// every node and one QOS "normal".
func DefaultConfig() Config {
	return Config{
		Partitions:        []Partition{{Name: "batch", Default: true, State: PartitionUp}},
		QOS:               []QOS{{Name: "normal"}},
		DefaultQOS:        "normal",
		NodeTimeout:       30 * time.Second,
		FailoverNodeGrace: DefaultFailoverNodeGrace,
		HeartbeatInterval: 5 * time.Second,
		SchedInterval:     5 * time.Second,
		MaxNodesPerJob:    1024,

		MaxSubmitBytes:        DefaultMaxSubmitBytes,
		MaxSubmitJobsPerUser:  DefaultMaxSubmitJobsPerUser,
		MaxSubmitBytesPerUser: DefaultMaxSubmitBytesPerUser,
	}
}

// idlePolicy is the policy for a job of partition part and QOS qos: the
// QOS's when it has one, else the partition's.
func (c *Config) idlePolicy(part, qos string) IdlePolicy {
	if q, ok := c.qos(qos); ok && q.Idle.Action != "" {
		return q.Idle
	}
	if p := c.partition(part); p != nil {
		return p.Idle
	}
	return IdlePolicy{}
}

// normalize fills defaults. It checks nothing: a configuration file is
// validated once, by gpud/config (every problem, named by its key),
// before FromConfig maps it; a Config built in Go is the caller's to get
// right.
func (c *Config) normalize() {
	d := DefaultConfig()
	if len(c.Partitions) == 0 {
		c.Partitions = d.Partitions
	}
	if len(c.QOS) == 0 {
		c.QOS = d.QOS
	}
	if c.DefaultQOS == "" {
		c.DefaultQOS = d.DefaultQOS
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = d.NodeTimeout
	}
	if c.FailoverNodeGrace == 0 {
		c.FailoverNodeGrace = d.FailoverNodeGrace
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.SchedInterval == 0 {
		c.SchedInterval = d.SchedInterval
	}
	if c.MaxNodesPerJob == 0 {
		c.MaxNodesPerJob = d.MaxNodesPerJob
	}
	if c.BackfillDepth == 0 {
		c.BackfillDepth = defaultBackfillDepth
	}
	c.Partitions = slices.Clone(c.Partitions)
	def := slices.IndexFunc(c.Partitions, func(p Partition) bool { return p.Default })
	for i := range c.Partitions {
		p := &c.Partitions[i]
		if p.State == "" {
			p.State = PartitionUp
		}
		p.State = strings.ToUpper(p.State)
	}
	if def < 0 {
		c.Partitions[0].Default = true
	}
	c.QOS = slices.Clone(c.QOS)
}

func (c *Config) partition(name string) *Partition {
	for i := range c.Partitions {
		if c.Partitions[i].Name == name {
			return &c.Partitions[i]
		}
	}
	return nil
}

func (c *Config) defaultPartition() *Partition {
	for i := range c.Partitions {
		if c.Partitions[i].Default {
			return &c.Partitions[i]
		}
	}
	return nil
}

func (c *Config) partitionNames() []string {
	var out []string
	for _, p := range c.Partitions {
		out = append(out, p.Name)
	}
	return out
}

func (c *Config) qosNames() []string {
	var out []string
	for _, q := range c.QOS {
		out = append(out, q.Name)
	}
	return out
}

func (c *Config) qos(name string) (QOS, bool) {
	for _, q := range c.QOS {
		if q.Name == name {
			return q, true
		}
	}
	return QOS{}, false
}

// partitionsOf lists the partitions node belongs to.
func (c *Config) partitionsOf(node string) []string {
	var out []string
	for _, p := range c.Partitions {
		if len(p.Nodes) == 0 || slices.Contains(p.Nodes, node) {
			out = append(out, p.Name)
		}
	}
	return out
}

// Account is one [[account]] of the fairshare tree; Parent "" or "root"
// puts it at the top.
type Account struct {
	Name   string
	Parent string
	Shares int
	Users  []string
	// Coordinators may cancel, hold, release and requeue the account's
	// jobs.
	Coordinators []string
	// AllowQOS are the QOSes the account's jobs may use; empty: all.
	AllowQOS []string
	// Limits over every QOS; 0 means none. MaxGPUs and MaxJobs cap
	// running jobs (AccountLimit at schedule time); MaxSubmitJobs (pending
	// and running), MaxWall and a spent MaxGPUHours budget are refused at
	// submit. The budget's use over the last BudgetPeriod comes from
	// SetBudgetUsage.
	MaxGPUs       int
	MaxJobs       int
	MaxSubmitJobs int
	MaxWall       time.Duration
	MaxGPUHours   float64
	BudgetPeriod  time.Duration
	// MaxSubmitJobsPerUser caps each user's pending + running jobs in the
	// account (refused at submit) for jobs whose QOS sets none, replacing
	// Config.MaxSubmitJobsPerUser for them; 0 means none of its own.
	MaxSubmitJobsPerUser int
}

// limited says whether a has any limit.
func (a *Account) limited() bool {
	return a.MaxGPUs > 0 || a.MaxJobs > 0 || a.MaxSubmitJobs > 0 || a.MaxWall > 0 || a.MaxGPUHours > 0
}

func (c *Config) account(name string) *Account {
	for i := range c.Accounts {
		if c.Accounts[i].Name == name {
			return &c.Accounts[i]
		}
	}
	return nil
}
