package node

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/gpu"
)

// Config is the node agent's configuration. The caller (gpud main) builds
// it from node.toml and flags, including the GPU inventory.
type Config struct {
	// Name is the node's name in the cluster; also the value of the
	// gpud.node label on every container this agent owns.
	Name string
	// StateDir holds outbox.db and jobs/<container ID>/. It must survive
	// agent restarts (it is how exits that happened meanwhile are known
	// not to be reported twice).
	StateDir string
	// Inventory is what the agent registers. Name, Addr and Version are
	// filled from the fields below when empty.
	Inventory spec.Inventory
	// KillGrace is how long a job has between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// OverTimeLimit is how long a job may run past its time limit before
	// the node stops it (Slurm's OverTimeLimit): a site's allowance for
	// a slow start (container creation, prologs) or a job finishing its
	// last write. The limit itself is unchanged: backfill plans with it,
	// and a checkpoint or --signal before the limit comes when it says.
	OverTimeLimit time.Duration
	// StopJobsOnStop makes a clean stop of the agent end its running jobs
	// too (SIGTERM, KillGrace, SIGKILL; recorded NODE_FAIL, so the
	// controller requeues those that allow it) instead of leaving them
	// running for the next agent to re-adopt: gpud standalone --stop-jobs.
	StopJobsOnStop bool
	// HeartbeatInterval is used when the controller does not say.
	HeartbeatInterval time.Duration
	// PollWait is how long one assignments long poll may wait.
	PollWait time.Duration
	// Hostname is the containers' hostname and, with Addr, what other
	// ranks use as MASTER_ADDR when this node is rank 0.
	Hostname string
	// Addr is the address other nodes reach this one at (registered in
	// the inventory); empty means Hostname.
	Addr string
	// DefaultImage is used for jobs that name no image.
	DefaultImage string
	// PrefetchImages pulls the images of pending jobs the controller
	// expects to start here (heartbeat answers) while they wait
	// (prefetch.go; node.toml [images] prefetch).
	PrefetchImages bool
	// ToolsDir holds srun and gpud's other CLIs (with Slurm's names); it is
	// mounted read-only into every job at its own path and put first on
	// the job's PATH. Empty: jobs get no tools.
	ToolsDir string
	// CheckpointRoot holds per-job checkpoint directories
	// (<root>/<job id>/staging, sealed ckpt-<seq>). Empty means
	// StateDir/checkpoints.
	CheckpointRoot string
	// CheckpointKeep is how many sealed checkpoints of each job are kept.
	CheckpointKeep int
	// CheckpointTimeout bounds how long the agent waits for a job to
	// complete a checkpoint after signalling it (touch .done, or exit
	// with checkpoint.ExitCodeCheckpointed); a stop that asked for a
	// checkpoint first then goes ahead without one.
	CheckpointTimeout time.Duration
	// CheckpointRetention is how long a job directory holding sealed
	// checkpoints stays after the controller said no job will restart
	// from it (its job ended for good, or is unknown to it), counted
	// from the job's end or the directory's last change, whichever is
	// later (retain.go). 0 means DefaultCheckpointRetention; negative
	// removes at once (node.toml checkpoint_retention = "0").
	CheckpointRetention time.Duration
	// CheckpointReportEvery is how often the heartbeat lists the job
	// directories holding sealed checkpoints that no runner on the node
	// uses; 0 means DefaultCheckpointReportEvery.
	CheckpointReportEvery time.Duration
	// Version of the agent, reported in the inventory.
	Version string
	// SysfsRoot is where the NUMA topology is read
	// (<root>/devices/system/node); empty means /sys.
	SysfsRoot string
	// UsageInterval is how often the usage of each running job is sampled
	// and sent to accounting; negative turns sampling off.
	UsageInterval time.Duration
	// HidePaths are directories of daemon state that jobs running on the
	// host's root must not see, besides StateDir and CheckpointRoot, which
	// are always hidden: the controller's state directory when it runs on
	// this host, say. Each is covered by an empty tmpfs in the container;
	// the job's own directory, its checkpoint directory and its work and
	// output directories are bound back on top.
	HidePaths []string
	// ShowPaths are files under a hidden directory that jobs still see at
	// their path: the controller's unix socket, so jobs can submit jobs.
	ShowPaths []string
	// Mounts are the site's shared filesystems (node.toml mounts): each
	// that exists on this node is bound read-write at its own path into
	// jobs on the host's root (which matters where HostRootReadOnly).
	Mounts []string
	// HostRootReadOnly makes the host's root read-only in jobs on it
	// (node.toml host_root = "read-only"); by default they write where
	// their uid may, as Slurm jobs do.
	HostRootReadOnly bool
	// SharedTmp gives jobs the node's /tmp (node.toml private_tmp =
	// false) instead of a private one each (Slurm's job_container/tmpfs,
	// the default).
	SharedTmp bool
	// PreparedContainers is how many containers the agent keeps prepared
	// for the next jobs of each shape it started (node.toml
	// prepared_containers; prepared.go); 0: none, every job's container
	// is made when it starts. PreparedMax bounds them on the node
	// (prepared_max; default DefaultPreparedMax) and PreparedMaxAge how
	// long one waits unclaimed before it is destroyed (prepared_max_age;
	// default DefaultPreparedMaxAge).
	PreparedContainers int
	PreparedMax        int
	PreparedMaxAge     time.Duration
}

// Defaults for Config fields left zero.
const (
	DefaultKillGrace         = 30 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultPollWait          = 30 * time.Second
	DefaultCheckpointKeep    = 3
	DefaultCheckpointTimeout = time.Minute
	// DefaultCheckpointRetention keeps an ended job's checkpoints for a
	// week: time to look at or copy them.
	DefaultCheckpointRetention   = 7 * 24 * time.Hour
	DefaultCheckpointReportEvery = 5 * time.Minute
	DefaultUsageInterval         = 30 * time.Second
	DefaultPreparedMax           = 8
	DefaultPreparedMaxAge        = time.Minute
)

// withDefaults returns c with zero fields filled in.
func (c Config) withDefaults() Config {
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.PollWait <= 0 {
		c.PollWait = DefaultPollWait
	}
	if c.CheckpointKeep <= 0 {
		c.CheckpointKeep = DefaultCheckpointKeep
	}
	if c.CheckpointTimeout <= 0 {
		c.CheckpointTimeout = DefaultCheckpointTimeout
	}
	if c.CheckpointRetention == 0 {
		c.CheckpointRetention = DefaultCheckpointRetention
	}
	if c.CheckpointReportEvery <= 0 {
		c.CheckpointReportEvery = DefaultCheckpointReportEvery
	}
	if c.UsageInterval == 0 {
		c.UsageInterval = DefaultUsageInterval
	}
	if c.Hostname == "" {
		if h, err := os.Hostname(); err == nil {
			c.Hostname = h
		} else {
			c.Hostname = c.Name
		}
	}
	if c.Addr == "" {
		c.Addr = c.Hostname
	}
	if c.DefaultImage == "" {
		c.DefaultImage = runtime.ImageHost
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = "/sys"
	}
	if c.PreparedMax <= 0 {
		c.PreparedMax = DefaultPreparedMax
	}
	if c.PreparedMaxAge <= 0 {
		c.PreparedMaxAge = DefaultPreparedMaxAge
	}
	if c.CheckpointRoot == "" && c.StateDir != "" {
		c.CheckpointRoot = filepath.Join(c.StateDir, "checkpoints")
	}
	c.Inventory.GPUs = append([]spec.GPU(nil), c.Inventory.GPUs...)
	if c.Inventory.Name == "" {
		c.Inventory.Name = c.Name
	}
	if c.Inventory.Addr == "" {
		c.Inventory.Addr = c.Addr
	}
	if c.Inventory.Version == "" {
		c.Inventory.Version = c.Version
	}
	return c
}

// validate returns every problem with c.
func (c Config) validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "node name is empty; set it in node.toml or with --name"))
	}
	if c.Inventory.Name != c.Name {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "inventory name %q differs from node name %q; leave the inventory name empty", c.Inventory.Name, c.Name))
	}
	if c.StateDir == "" {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "node state directory is empty; set state_dir in node.toml"))
	} else if !filepath.IsAbs(c.StateDir) {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "node state directory %q is relative; give an absolute path", c.StateDir))
	}
	for i, g := range c.Inventory.GPUs {
		if g.UUID == "" {
			errs = append(errs, spec.Errorf(spec.ErrInvalid, "inventory GPU %d has no UUID", i))
		}
	}
	return errors.Join(errs...)
}

// Option configures an Agent beyond its Config.
type Option func(*options)

type options struct {
	sampler    gpu.Sampler
	log        *slog.Logger
	clock      Clock
	backoffMin time.Duration
	backoffMax time.Duration
	// healthSampler watches GPU health (nil: none); sampler feeds usage
	// samples. Both are the node's GPU backend when it can sample.
	healthSampler gpu.Sampler
	health        HealthConfig
	mig           *MIGConfig
	// usageTicks paces usage sampling instead of a real ticker.
	usageTicks <-chan time.Time
	// memOutbox keeps the outbox in memory (gpud loadtest's many agents).
	memOutbox bool
	// peers finds the other nodes' agents for steps (nil: this node only).
	peers *Peers
	// stepNet is the step listener and the node's identity for peers on
	// other hosts (nil: none; gpud/node/step).
	stepNet *StepNet
	// net is the clock of the agent's contact with the controller (the
	// self-fence, fence.go); real time unless a test injects one.
	net Clock
	// startedHold bounds the send loop's hold of started events
	// (sendhold.go); 0: defaultStartedHold, negative: no hold (tests).
	startedHold time.Duration
}

// WithMemoryOutbox keeps the outbox in the agent's memory (outbox_mem.go)
// instead of StateDir/outbox.db. It is for gpud loadtest only, which runs
// thousands of simulated agents in one process: an on-disk outbox holds
// three file descriptors (database, WAL, shared memory) and a container's
// open-files limit then caps the process at a few thousand agents. An
// in-memory outbox survives no restart, so a real node must never use it;
// the protocol (record, send in order, acknowledge) is the same.
func WithMemoryOutbox() Option { return func(o *options) { o.memOutbox = true } }

// Peers finds the agents of other nodes in this process for steps
// (gpud standalone).
type Peers = step.Peers

// NewPeers returns an empty registry; agents given it with WithPeers add
// themselves while they run.
func NewPeers() *Peers { return step.NewPeers() }

// WithPeers has the agent join reg, through which the agents of one
// allocation start each other's parts of a step (gpud/node/step).
func WithPeers(reg *Peers) Option { return func(o *options) { o.peers = reg } }

// StepNet is a node's part in steps across hosts: its step listener, its
// node certificate and the cluster CA (gpud/node/step).
type StepNet = step.Net

// WithStepNet has the agent serve steps to peers and srun on sn.Listener
// and reach peers on other hosts with sn's identity.
func WithStepNet(sn StepNet) Option { return func(o *options) { o.stepNet = &sn } }

// WithLogger sets the agent's logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithGPUSampler sets where usage samples read the GPUs from (the NVML
// backend); without it samples carry only the cgroup's CPU and memory.
func WithGPUSampler(s gpu.Sampler) Option { return func(o *options) { o.sampler = s } }

// WithClock sets the clock for job time (deadlines, kill grace, event
// times); tests pass a fake.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithUsageTicks paces usage sampling by ticks instead of a ticker of
// Config.UsageInterval: one sample round per tick received, so a test
// knows when one ran (a second send returns only after the first round
// is done). The samples' times stay the Clock's.
func WithUsageTicks(ticks <-chan time.Time) Option { return func(o *options) { o.usageTicks = ticks } }

// WithRetryBackoff sets the bounds of the exponential backoff between
// failed calls to the controller or the runtime (default 500ms to 30s).
func WithRetryBackoff(min, max time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

func (o *options) fill() {
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.clock == nil {
		o.clock = realClock{}
	}
	if o.net == nil {
		o.net = netClock{}
	}
	if o.backoffMin <= 0 {
		o.backoffMin = 500 * time.Millisecond
	}
	if o.backoffMax < o.backoffMin {
		o.backoffMax = max(30*time.Second, o.backoffMin)
	}
	if o.startedHold == 0 {
		o.startedHold = defaultStartedHold
	}
}

func (c Config) jobsDir() string { return filepath.Join(c.StateDir, "jobs") }

// stepSocketPool is where the step sockets of ended jobs wait for their
// users' next jobs (gpud/node/step's sockpool.go): beside jobs/, on its
// filesystem (a socket moves between them by rename), root's, 0700.
func (c Config) stepSocketPool() string { return filepath.Join(c.StateDir, "step-sockets") }
