package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/pmi"
)

// Controller is gpud.toml, the controller's configuration.
type Controller struct {
	Version int `toml:"version"`
	// DefaultQOS is the QOS of jobs that name none.
	DefaultQOS string `toml:"default_qos"`
	// DefaultAccount is the account of users who name none and are listed
	// in no account's users.
	DefaultAccount string            `toml:"default_account"`
	Controller     ControllerSection `toml:"controller"`
	Scheduler      Scheduler         `toml:"scheduler"`
	Fairshare      Fairshare         `toml:"fairshare"`
	Accounting     Accounting        `toml:"accounting"`
	Auth           Auth              `toml:"auth"`
	API            API               `toml:"api"`
	Limits         Limits            `toml:"limits"`
	Partitions     []Partition       `toml:"partition"`
	QOS            []QOS             `toml:"qos"`
	Accounts       []Account         `toml:"account"`
	// HA is [ha] (ha.go); absent, the controller runs alone.
	HA HA `toml:"ha"`
	// Privacy is [privacy].
	Privacy Privacy `toml:"privacy"`
	// Power is [power], power saving and CLOUD nodes (power.go).
	Power Power `toml:"power"`
}

// Privacy is [privacy], Slurm's PrivateData: what a user (not an
// operator, admin or root) may see of others. All false by default, as
// Slurm's: every user sees every job's queue entry, every user's usage,
// every association. Scripts, environments and paths are the owner's
// and operators' whatever this says.
type Privacy struct {
	// Jobs: users see only their own jobs and their coordinated
	// accounts' (queue, job details, accounting, priorities, nodes' job
	// lists, live usage); others are "not found".
	Jobs bool `toml:"jobs"`
	// Usage: users see only their own usage (and their coordinated
	// accounts' users'): sshare, sreport, gpuq top.
	Usage bool `toml:"usage"`
	// Users: users see no other user by name in association listings
	// (sacctmgr, sshare), but in the accounts they coordinate.
	Users bool `toml:"users"`
	// Accounts: users see only the accounts they belong to or
	// coordinate.
	Accounts bool `toml:"accounts"`
}

// ControllerSection is [controller]: where the controller listens and
// keeps state, and how it judges node liveness.
type ControllerSection struct {
	ListenSocket string `toml:"listen_socket"`
	// ListenTCP is host:port for remote users and nodes; empty disables.
	ListenTCP string `toml:"listen_tcp"`
	StateDir  string `toml:"state_dir"`
	// NodeTimeout without a heartbeat marks a node DOWN.
	NodeTimeout Duration `toml:"node_timeout"`
	// FailoverNodeGrace is how long a controller that just took the
	// lead (an HA failover, a start) waits for a node it has not heard
	// from yet before it marks it DOWN, when longer than node_timeout.
	FailoverNodeGrace Duration `toml:"failover_node_grace"`
	HeartbeatInterval Duration `toml:"heartbeat_interval"`
	AllowRootJobs     bool     `toml:"allow_root_jobs"`
	// MinJobAge is how long an ended job stays in the controller (squeue
	// -t all, scontrol show job, dependencies) once accounting holds it;
	// then it is purged from memory and state.db, as Slurm's MinJobAge.
	// "0s" keeps every job.
	MinJobAge Duration `toml:"min_job_age"`
	// MPIDefault is srun's --mpi when a step names none (Slurm's
	// MpiDefault): none, pmi2 or pmix.
	MPIDefault string `toml:"mpi_default"`
	// GCPercent is the controller process's Go GC target percentage
	// (GOGC), set at start (0: Go's own, 100); a GOGC in the environment
	// wins. The heap may grow this far past what is live before a
	// collection: 200 marks half as often as Go's 100, for more memory
	// (issue 31, 100,000 jobs queued: GC 7 to 8% less of the controller's
	// CPU, a 2.2 against 1.7 GiB peak RSS; docs/fleet.md, Session 13 — ctl).
	GCPercent int `toml:"gc_percent"`
}

// Scheduler is [scheduler].
type Scheduler struct {
	// Interval between full scheduling cycles; events trigger cycles too.
	Interval Duration `toml:"interval"`
	// MaxJobsPerCycle bounds the jobs one cycle starts; the next cycle
	// follows at once.
	MaxJobsPerCycle int `toml:"max_jobs_per_cycle"`
	// BackfillDepth is how many blocked jobs, highest priority first, get
	// a reservation each cycle; -1 means all (slow on big queues).
	BackfillDepth int `toml:"backfill_depth"`
	// BackfillWindow is how far ahead backfill plans reservations.
	BackfillWindow Duration `toml:"backfill_window"`
	// PreemptMinRuntime protects a running job from preemption until it
	// has run this long, so jobs are not thrashed.
	PreemptMinRuntime Duration `toml:"preempt_min_runtime"`
	// CheckpointGrace is how long the scheduler expects a checkpoint-mode
	// victim to take to checkpoint before it stops (the nodes' checkpoint
	// timeout bounds it); its preemptor's expected start is after it.
	CheckpointGrace Duration `toml:"checkpoint_grace"`
	Priority        Priority `toml:"priority"`
}

// Priority is [scheduler.priority], Slurm's multifactor weights. Each
// factor is normalised to [0,1] and multiplied by its weight.
type Priority struct {
	WeightAge       int64 `toml:"weight_age"`
	WeightFairshare int64 `toml:"weight_fairshare"`
	WeightJobSize   int64 `toml:"weight_job_size"`
	WeightPartition int64 `toml:"weight_partition"`
	WeightQOS       int64 `toml:"weight_qos"`
	// MaxAge is the queue time at which the age factor reaches 1.
	MaxAge Duration `toml:"max_age"`
}

// Fairshare is [fairshare].
type Fairshare struct {
	// DecayHalfLife halves past usage's weight every period.
	DecayHalfLife Duration `toml:"decay_half_life"`
	// GPUModelWeights bills a GPU-second of a model ("h100" = 2) in
	// fairshare usage; models not listed weigh 1.
	GPUModelWeights map[string]float64 `toml:"gpu_model_weights"`
}

// Accounting is [accounting].
type Accounting struct {
	// Path of accounting.db; empty means accounting.db in the state dir
	// (see Controller.AccountingPath).
	Path string `toml:"path"`
	// GridIntensity is the electricity's carbon intensity in grams of
	// CO2e per kWh, for gpuq acct/report's co2_kg; 0 reports none.
	GridIntensity float64 `toml:"grid_intensity_g_per_kwh"`
	// GPUHourPrice is the price of one GPU-hour by GPU model ("h100" =
	// 2.5), for gpuq acct/report's cost; a model not listed costs 0.
	GPUHourPrice map[string]float64 `toml:"gpu_hour_price"`
	// AuditMaxAge and AuditMaxSize are the audit log's retention: older
	// entries, and the oldest once it takes more (a size, as
	// [limits]'s), are deleted every minute; "UNLIMITED" keeps all.
	// AuditMinFree is the free space the audit log leaves on its file
	// system: below it, the log stops growing (its oldest entries make
	// room for new ones), so state.db beside it keeps room for jobs.
	AuditMaxAge  Duration `toml:"audit_max_age"`
	AuditMaxSize string   `toml:"audit_max_size"`
	AuditMinFree string   `toml:"audit_min_free"`
}

// AuditMaxBytes is audit_max_size in bytes, 0 for no limit.
func (a Accounting) AuditMaxBytes() int64 { n, _ := sizeBytes(a.AuditMaxSize); return n }

// AuditMinFreeBytes is audit_min_free in bytes, 0 for none.
func (a Accounting) AuditMinFreeBytes() int64 { n, _ := sizeBytes(a.AuditMinFree); return n }

// Auth is [auth]: identity of remote callers (TLS on listen_tcp, signed
// bearer tokens) and the roles of users.
type Auth struct {
	// ClusterName is the tokens' issuer ("iss"): a token from another
	// cluster is refused.
	ClusterName string `toml:"cluster_name"`
	// TLSCert and TLSKey are the server certificate and key for
	// listen_tcp; both empty means the controller makes (on first start) a
	// CA and a server certificate under <state_dir>/tls.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// TLSHosts are extra host names and IP addresses the generated server
	// certificate covers (besides localhost, the machine's host name and
	// listen_tcp's host).
	TLSHosts []string `toml:"tls_hosts"`
	// TokenKey is the token signing key file; empty means
	// <state_dir>/auth/token.key (made on first start).
	TokenKey string `toml:"token_key"`
	// ClockSkew is tolerated on token expiry and not-before.
	ClockSkew Duration `toml:"clock_skew"`
	// Operators and Admins are user names with those roles; root is
	// always admin, everyone else a user.
	Operators []string `toml:"operators"`
	Admins    []string `toml:"admins"`
	// RevokedTokens are token IDs ("jti", shown by gpud token issue)
	// refused before their expiry; a SIGHUP reload applies a change.
	RevokedTokens []string `toml:"revoked_tokens"`
	// RevokedNodeCerts are serial numbers (hex, as gpud prints them at
	// join and openssl x509 -serial shows them) of node certificates
	// refused from now on; a SIGHUP reload applies a change.
	RevokedNodeCerts []string `toml:"revoked_node_certs"`
	// SecretEnv lists environment variables (exact names, or prefixes
	// ending in '*') that never travel with a job, besides the GPUD_*
	// credentials (GPUD_TOKEN, ...), which never do: dropped at
	// submission, masked where an operator views an older job.
	SecretEnv []string `toml:"secret_env"`
}

// TLSDir is where the generated TLS material lives.
func (c Controller) TLSDir() string { return filepath.Join(c.Controller.StateDir, "tls") }

// TokenKeyPath is the token signing key file.
func (c Controller) TokenKeyPath() string {
	if c.Auth.TokenKey != "" {
		return c.Auth.TokenKey
	}
	return filepath.Join(c.Controller.StateDir, "auth", "token.key")
}

// API is [api]: limits at the API edge.
type API struct {
	// SubmitRate is how many submissions per second each user may
	// sustain (a token bucket of SubmitBurst); 0 turns the limit off.
	// root is never limited.
	SubmitRate  float64 `toml:"submit_rate"`
	SubmitBurst int     `toml:"submit_burst"`
	// RefusalRate and RefusalBurst are each source's budget of refused
	// requests (a token bucket): an address that keeps failing
	// authentication, or a user whose calls keep being refused, is
	// slowed down once over it (gpud/server refusal.go). 0 turns the
	// slow-down off; refusals are counted and summarised in the audit
	// log all the same.
	RefusalRate  float64 `toml:"refusal_rate"`
	RefusalBurst int     `toml:"refusal_burst"`
	// ReadTimeout bounds reading one request (headers and body);
	// IdleTimeout closes a keep-alive connection left without a request;
	// WriteTimeout bounds writing one response (long polls get their
	// wait on top).
	ReadTimeout  Duration `toml:"read_timeout"`
	IdleTimeout  Duration `toml:"idle_timeout"`
	WriteTimeout Duration `toml:"write_timeout"`
	// MaxConnsPerUser caps one uid's open connections on the unix socket
	// (root is never capped); MaxConnsPerIP one address's TCP connections
	// until they show a node certificate. MaxConns caps all capped
	// connections together; 0 means three quarters of the open-file
	// limit. ConnLimitExempt lists networks (CIDR) never capped: node
	// networks behind one NAT address.
	MaxConnsPerUser int      `toml:"max_conns_per_user"`
	MaxConnsPerIP   int      `toml:"max_conns_per_ip"`
	MaxConns        int      `toml:"max_conns"`
	ConnLimitExempt []string `toml:"conn_limit_exempt"`
}

// ExemptPrefixes parses ConnLimitExempt (validated: errors are skipped).
func (a API) ExemptPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, c := range a.ConnLimitExempt {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Limits is [limits]: how much one request, and one user, may add to the
// controller's state (state.db and memory).
type Limits struct {
	// MaxSubmitSize caps what one submission stores: its script,
	// arguments and environment once, plus each task's record (its
	// comment included; an array's tasks each have one). A size like "64M" or "1G" (binary
	// units, a bare number is MiB); "UNLIMITED" (or "0") for none.
	MaxSubmitSize string `toml:"max_submit_size"`
	// MaxSubmitJobsPerUser caps one user's pending + running jobs (array
	// tasks count) unless the job's QOS, or else its account, sets its
	// own max_submit_jobs_per_user; 0 means none. root is not limited.
	MaxSubmitJobsPerUser int `toml:"max_submit_jobs_per_user"`
	// MaxSubmitSizePerUser caps what one user's pending + running jobs
	// store (each plain job's or array's payload once, and each job's
	// record, which scontrol update can grow); a size or "UNLIMITED", as
	// MaxSubmitSize. root is not limited.
	MaxSubmitSizePerUser string `toml:"max_submit_size_per_user"`
}

// DefaultMaxSubmitJobsPerUser is [limits] max_submit_jobs_per_user's
// default: one array of the largest size (10,000 tasks, as Slurm's
// default MaxJobCount), at about 1 KiB of controller heap per pending job.
const DefaultMaxSubmitJobsPerUser = 10000

// MaxSubmitBytes is max_submit_size in bytes, 0 for no limit (or an
// invalid value, which Validate reports).
func (l Limits) MaxSubmitBytes() int64 { n, _ := sizeBytes(l.MaxSubmitSize); return n }

// MaxSubmitBytesPerUser is max_submit_size_per_user in bytes, 0 for no
// limit (or an invalid value, which Validate reports).
func (l Limits) MaxSubmitBytesPerUser() int64 { n, _ := sizeBytes(l.MaxSubmitSizePerUser); return n }

// sizeBytes reads a size limit: "64M", "1G" (binary units, a bare
// number is MiB, at most 1T), or "UNLIMITED", "0" or "" for none (0).
func sizeBytes(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || strings.EqualFold(s, Unlimited) {
		return 0, true
	}
	mib, err := parseMemMiB(s)
	if err != nil || mib > 1<<20 {
		return 0, false
	}
	return mib << 20, true
}

func (l Limits) validate(p *problems) {
	for _, f := range []struct{ key, v string }{{"max_submit_size", l.MaxSubmitSize}, {"max_submit_size_per_user", l.MaxSubmitSizePerUser}} {
		if _, ok := sizeBytes(f.v); !ok {
			p.addf("[limits] %s: %q is not a size from 1M to 1T (e.g. \"64M\", \"1G\"), or \"UNLIMITED\"", f.key, f.v)
		}
	}
	if l.MaxSubmitJobsPerUser < 0 {
		p.addf("[limits] max_submit_jobs_per_user: %d must not be negative (0 = no limit)", l.MaxSubmitJobsPerUser)
	}
}

// AllNodes in Partition.Nodes puts every node in the partition.
const AllNodes = "ALL"

// Partition states.
const (
	PartitionUp   = "UP"
	PartitionDown = "DOWN"
)

// Partition is one [[partition]].
type Partition struct {
	Name string `toml:"name"`
	// Nodes are node names, or ["ALL"].
	Nodes   []string `toml:"nodes"`
	Default bool     `toml:"default"`
	// DefaultTime is the time limit of jobs that give none; MaxTime caps
	// every job's (UNLIMITED for none).
	DefaultTime  Duration `toml:"default_time"`
	MaxTime      Duration `toml:"max_time"`
	PriorityTier int      `toml:"priority_tier"`
	// RequeueExpedite makes every job of the partition behave as if
	// submitted with --requeue=expedite.
	RequeueExpedite bool `toml:"requeue_expedite"`
	// StartGate is the check of a job's GPUs on the node before the job
	// starts there: one of StartGates ("" is "quick"). A GPU that fails
	// it is taken out of service and the job placed again, not charged a
	// restart (docs/health.md).
	StartGate string `toml:"start_gate"`
	// Who may use the partition, as Slurm's partition access rules: jobs
	// of accounts in AllowAccounts (empty: every account) and not in
	// DenyAccounts, of users in a group of AllowGroups (group names;
	// empty: everyone), of a QOS in AllowQOS (empty: every QOS) and not
	// in DenyQOS. An allow list and its deny list are not both set. They
	// are checked wherever a job enters the partition or changes in it
	// (submit, arrays, srun/salloc, scontrol update, requeue) and, after
	// a reload, for its queued jobs (gpud/controller access.go). Jobs of
	// root pass.
	AllowAccounts []string `toml:"allow_accounts"`
	DenyAccounts  []string `toml:"deny_accounts"`
	AllowGroups   []string `toml:"allow_groups"`
	AllowQOS      []string `toml:"allow_qos"`
	DenyQOS       []string `toml:"deny_qos"`
	// Hidden partitions, and their jobs, are shown only to operators and
	// to users the access rules let use them; to anyone else the
	// partition does not exist.
	Hidden bool `toml:"hidden"`
	// State is "UP" or "DOWN"; left out, a partition is UP, as in Slurm.
	State string `toml:"state"`
	// Placement is how jobs are put on nodes: one of Placements, "pack"
	// by default (gpud/controller maps it onto sched.Placement).
	Placement string `toml:"placement"`
	IdlePolicy
}

// StartGates are the start gates a partition may give: "quick" (the
// node's health model judges a fresh reading of the job's GPUs: an XID,
// row remapping pending or failed, an NVLink down, new uncorrected ECC
// errors, a vanished GPU or one it holds faulted) or "off".
var StartGates = []string{"quick", "off"}

// Placements are the placement names a partition may give ("" is
// "pack"). The names are gpud/sched's (sched.Placements); gpud/config
// keeps its own list so that it imports no scheduler, and a controller
// test checks that the two lists agree.
var Placements = []string{"pack", "spread", "first-fit", "fgd"}

// Idle actions: what happens to a job whose GPUs stay idle.
const (
	// IdleFlag marks the job (gpuq shows it).
	IdleFlag = "flag"
	// IdleHook marks it and runs idle_hook once.
	IdleHook = "hook"
	// IdleCancel cancels it (after idle_hook, if one is set).
	IdleCancel = "cancel"
)

var idleActions = []string{IdleFlag, IdleHook, IdleCancel}

// IdlePolicy is the idle-GPU policy of a [[partition]] or a [[qos]] (a
// job's QOS policy wins over its partition's when it sets idle_action): a
// running job whose GPUs all stay below IdleGPUUtil percent for IdleAfter
// is acted on. An empty IdleAction turns the policy off.
type IdlePolicy struct {
	IdleGPUUtil float64  `toml:"idle_gpu_util"`
	IdleAfter   Duration `toml:"idle_after"`
	IdleAction  string   `toml:"idle_action"`
	// IdleHook is a program (absolute path, then arguments) run once per
	// idle job with the job id, user and reason appended and in
	// GPUD_JOB_ID, GPUD_JOB_USER, GPUD_JOB_ACCOUNT, GPUD_IDLE_REASON.
	IdleHook string `toml:"idle_hook"`
}

// validate adds the policy's problems under key.
func (ip IdlePolicy) validate(p *problems, key string) {
	set := ip.IdleGPUUtil != 0 || ip.IdleAfter != "" || ip.IdleHook != ""
	if ip.IdleAction == "" {
		if set {
			p.addf("%s idle_action: empty (policy off) but idle_gpu_util, idle_after or idle_hook is set; choose %s, or remove them", key, quoteList(idleActions))
		}
		return
	}
	if !slices.Contains(idleActions, ip.IdleAction) {
		p.addf("%s idle_action: %q is not allowed (use %s, or \"\" for off)", key, ip.IdleAction, quoteList(idleActions))
	}
	if ip.IdleGPUUtil <= 0 || ip.IdleGPUUtil > 100 {
		p.addf("%s idle_gpu_util: %g must be a percentage above 0 and at most 100 (e.g. 5)", key, ip.IdleGPUUtil)
	}
	p.duration(key+" idle_after", ip.IdleAfter, true)
	hook := strings.Fields(ip.IdleHook)
	switch {
	case ip.IdleAction == IdleHook && len(hook) == 0:
		p.addf("%s idle_hook: missing; idle_action = \"hook\" needs a program to run (absolute path)", key)
	case len(hook) > 0 && !filepath.IsAbs(hook[0]):
		p.addf("%s idle_hook: %q is not an absolute path; name the program as /path/to/program", key, hook[0])
	}
}

// Preempt modes: how jobs of the QOSes in QOS.Preempt are preempted.
const (
	PreemptRequeue    = "requeue"
	PreemptCancel     = "cancel"
	PreemptCheckpoint = "checkpoint"
	PreemptOff        = "off"
)

var preemptModes = []string{PreemptRequeue, PreemptCancel, PreemptCheckpoint, PreemptOff}

// QOS is one [[qos]].
type QOS struct {
	Name     string `toml:"name"`
	Priority int64  `toml:"priority"`
	// Per-user limits; 0 means no limit.
	MaxGPUsPerUser int      `toml:"max_gpus_per_user"`
	MaxJobsPerUser int      `toml:"max_jobs_per_user"`
	MaxWall        Duration `toml:"max_wall"`
	// MaxSubmitJobsPerUser caps a user's pending + running jobs in this
	// QOS, replacing [limits] max_submit_jobs_per_user for its jobs.
	MaxSubmitJobsPerUser int `toml:"max_submit_jobs_per_user"`
	// Preempt lists the QOSes whose jobs this QOS's jobs may preempt, and
	// PreemptMode how.
	Preempt     []string `toml:"preempt"`
	PreemptMode string   `toml:"preempt_mode"`
	IdlePolicy
}

// RootAccount is the implicit root of the account tree; an account with
// no parent hangs under it.
const RootAccount = "root"

// Account is one [[account]] of the fairshare tree.
type Account struct {
	Name   string   `toml:"name"`
	Parent string   `toml:"parent"`
	Shares int      `toml:"shares"`
	Users  []string `toml:"users"`
	// Coordinators may cancel, hold, release and requeue the account's
	// jobs (Slurm's account coordinators).
	Coordinators []string `toml:"coordinators"`
	// AllowQOS are the QOSes the account's jobs may use (Slurm's
	// association QOS list); empty allows every QOS.
	AllowQOS []string `toml:"allow_qos"`
	// Limits over every QOS; 0 (or "" for durations) means none. MaxGPUs
	// and MaxJobs cap running jobs (schedule time: AccountLimit);
	// MaxSubmitJobs caps pending + running jobs and MaxWall the time
	// limit (both refused at submit); MaxGPUHours is a GPU-hour budget
	// over the last BudgetPeriod, refused at submit once spent.
	MaxGPUs       int      `toml:"max_gpus"`
	MaxJobs       int      `toml:"max_jobs"`
	MaxSubmitJobs int      `toml:"max_submit_jobs"`
	MaxWall       Duration `toml:"max_wall"`
	MaxGPUHours   float64  `toml:"max_gpu_hours"`
	BudgetPeriod  Duration `toml:"budget_period"`
	// MaxSubmitJobsPerUser caps each user's pending + running jobs in
	// this account, replacing [limits] max_submit_jobs_per_user for its
	// jobs unless their QOS sets its own.
	MaxSubmitJobsPerUser int `toml:"max_submit_jobs_per_user"`
}

// DefaultBudgetPeriod is an account's budget_period when it gives none.
const DefaultBudgetPeriod = 30 * 24 * time.Hour

// Budget returns a's budget window: budget_period, DefaultBudgetPeriod
// when it is "", 0 (all history) when it is "UNLIMITED".
func (a Account) Budget() time.Duration {
	if a.BudgetPeriod == "" {
		return DefaultBudgetPeriod
	}
	return a.BudgetPeriod.Std()
}

// Defaults returns the controller configuration used when no file is
// given; a file's keys override it, and a file's [[partition]], [[qos]]
// or [[account]] tables replace the default lists as a whole.
func Defaults() Controller {
	return Controller{
		Version:        Version,
		DefaultQOS:     "normal",
		DefaultAccount: "default",
		Controller: ControllerSection{
			ListenSocket:      "/run/gpud/gpud.sock",
			StateDir:          "/var/lib/gpud",
			NodeTimeout:       "30s",
			FailoverNodeGrace: "2m",
			HeartbeatInterval: "5s",
			AllowRootJobs:     true,
			MinJobAge:         "5m",
			MPIDefault:        "none",
			GCPercent:         200,
		},
		Scheduler: Scheduler{
			Interval:          "5s",
			MaxJobsPerCycle:   1000,
			BackfillDepth:     100,
			BackfillWindow:    "24h",
			PreemptMinRuntime: "0s",
			CheckpointGrace:   "1m",
			Priority: Priority{
				WeightAge:       1000,
				WeightFairshare: 10000,
				WeightJobSize:   1000,
				WeightPartition: 1000,
				WeightQOS:       10000,
				MaxAge:          "7d",
			},
		},
		Fairshare:  Fairshare{DecayHalfLife: "7d", GPUModelWeights: map[string]float64{}},
		Accounting: Accounting{GPUHourPrice: map[string]float64{}, AuditMaxAge: "365d", AuditMaxSize: "1G", AuditMinFree: "256M"},
		Auth:       Auth{ClusterName: "gpud", ClockSkew: "2m"},
		API: API{SubmitRate: 20, SubmitBurst: 200, RefusalRate: 2, RefusalBurst: 60, ReadTimeout: "30s", IdleTimeout: "60s", WriteTimeout: "10m",
			MaxConnsPerUser: 128, MaxConnsPerIP: 256},
		Limits: Limits{MaxSubmitSize: "64M", MaxSubmitJobsPerUser: DefaultMaxSubmitJobsPerUser, MaxSubmitSizePerUser: "1G"},
		Partitions: []Partition{{
			Name:        "gpu",
			Nodes:       []string{AllNodes},
			Default:     true,
			DefaultTime: "1h",
			MaxTime:     Unlimited,
			State:       PartitionUp,
			Placement:   Placements[0],
			StartGate:   StartGates[0],
		}},
		QOS: []QOS{
			{Name: "low", Priority: 0, PreemptMode: PreemptOff},
			{Name: "normal", Priority: 100, PreemptMode: PreemptOff},
			{Name: "high", Priority: 1000, Preempt: []string{"low"}, PreemptMode: PreemptRequeue},
		},
		Accounts: []Account{{Name: "default", Shares: 1}},
		// Slurm's defaults.
		Power: Power{ResumeTimeout: "60s", SuspendTimeout: "30s", ResumeRate: 300, SuspendRate: 60},
	}
}

// LoadController reads gpud.toml at path over Defaults and validates it.
// An empty path means the defaults alone; a path that does not exist is
// an error.
func LoadController(path string) (Controller, error) {
	c := Defaults()
	if err := load(path, &c); err != nil {
		return Controller{}, err
	}
	if err := c.Validate(); err != nil {
		if path != "" {
			return Controller{}, fmt.Errorf("config %s: %w", path, err)
		}
		return Controller{}, err
	}
	return c, nil
}

// AccountingPath is where accounting.db lives.
func (c Controller) AccountingPath() string {
	if c.Accounting.Path != "" {
		return c.Accounting.Path
	}
	return filepath.Join(c.Controller.StateDir, "accounting.db")
}

// DefaultPartition returns the partition marked default. Valid configs
// have exactly one.
func (c Controller) DefaultPartition() (Partition, bool) {
	for _, p := range c.Partitions {
		if p.Default {
			return p, true
		}
	}
	return Partition{}, false
}

// Validate returns every problem in c, joined, each naming its key.
func (c Controller) Validate() error {
	var p problems
	if c.Version != Version {
		p.addf("version: %d is not supported; this gpud reads version %d", c.Version, Version)
	}

	cs := c.Controller
	if cs.ListenSocket == "" && cs.ListenTCP == "" {
		p.addf("[controller] listen_socket: empty while listen_tcp is empty too; set at least one so clients can connect")
	}
	if cs.ListenSocket != "" && !filepath.IsAbs(cs.ListenSocket) {
		p.addf("[controller] listen_socket: %q must be an absolute path", cs.ListenSocket)
	}
	if cs.ListenTCP != "" {
		if host, port, ok := strings.Cut(cs.ListenTCP, ":"); !ok || port == "" || strings.Contains(host, "/") {
			p.addf("[controller] listen_tcp: %q is not host:port (use e.g. \"0.0.0.0:6817\", or \"\" to disable)", cs.ListenTCP)
		}
	}
	if cs.StateDir == "" || !filepath.IsAbs(cs.StateDir) {
		p.addf("[controller] state_dir: %q must be an absolute path", cs.StateDir)
	}
	p.duration("[controller] node_timeout", cs.NodeTimeout, true)
	p.duration("[controller] failover_node_grace", cs.FailoverNodeGrace, false)
	p.duration("[controller] heartbeat_interval", cs.HeartbeatInterval, true)
	p.duration("[controller] min_job_age", cs.MinJobAge, false)
	if cs.MPIDefault != "" {
		if _, err := pmi.Parse(cs.MPIDefault); err != nil {
			p.addf("[controller] mpi_default: %q is not an MPI type; use %q, %q or %q", cs.MPIDefault, pmi.None, pmi.PMI2, pmi.PMIx)
		}
	}
	if cs.GCPercent != 0 && (cs.GCPercent < 25 || cs.GCPercent > 1000) {
		p.addf("[controller] gc_percent: %d is out of range; use 25 to 1000 (Go's own default is 100, gpud's 200), or 0 to leave Go's", cs.GCPercent)
	}
	if hb, nt := cs.HeartbeatInterval.Std(), cs.NodeTimeout.Std(); hb > 0 && nt > 0 && nt < 2*hb {
		p.addf("[controller] node_timeout: %s must be at least twice heartbeat_interval (%s), or one late heartbeat marks a node DOWN",
			cs.NodeTimeout, cs.HeartbeatInterval)
	}

	s := c.Scheduler
	p.duration("[scheduler] interval", s.Interval, true)
	if s.MaxJobsPerCycle < 1 {
		p.addf("[scheduler] max_jobs_per_cycle: %d must be at least 1", s.MaxJobsPerCycle)
	}
	p.duration("[scheduler] backfill_window", s.BackfillWindow, true)
	if s.BackfillDepth < -1 || s.BackfillDepth == 0 {
		p.addf("[scheduler] backfill_depth: %d must be at least 1, or -1 for every blocked job", s.BackfillDepth)
	}
	p.duration("[scheduler] preempt_min_runtime", s.PreemptMinRuntime, false)
	p.duration("[scheduler] checkpoint_grace", s.CheckpointGrace, false)
	for _, w := range []struct {
		key string
		v   int64
	}{
		{"weight_age", s.Priority.WeightAge}, {"weight_fairshare", s.Priority.WeightFairshare},
		{"weight_job_size", s.Priority.WeightJobSize}, {"weight_partition", s.Priority.WeightPartition},
		{"weight_qos", s.Priority.WeightQOS},
	} {
		// Bounded so the weighted sum of five factors fits in an int64.
		if w.v < 0 || w.v > 1<<32 {
			p.addf("[scheduler.priority] %s: %d must be between 0 and %d", w.key, w.v, int64(1)<<32)
		}
	}
	p.duration("[scheduler.priority] max_age", s.Priority.MaxAge, true)
	p.duration("[fairshare] decay_half_life", c.Fairshare.DecayHalfLife, true)
	for m, w := range c.Fairshare.GPUModelWeights {
		if w < 0 || m == "" {
			p.addf("[fairshare] gpu_model_weights %q = %v: give a GPU model and a weight of 0 or more", m, w)
		}
	}
	if g := c.Accounting.GridIntensity; g < 0 || g > 5000 {
		p.addf("[accounting] grid_intensity_g_per_kwh: %v is outside 0-5000 (grams of CO2e per kWh; e.g. 400)", g)
	}
	p.duration("[accounting] audit_max_age", c.Accounting.AuditMaxAge, false)
	for _, f := range []struct{ key, v string }{{"audit_max_size", c.Accounting.AuditMaxSize}, {"audit_min_free", c.Accounting.AuditMinFree}} {
		if _, ok := sizeBytes(f.v); !ok {
			p.addf("[accounting] %s: %q is not a size from 1M to 1T (e.g. \"256M\", \"1G\"), or \"UNLIMITED\"", f.key, f.v)
		}
	}
	for m, price := range c.Accounting.GPUHourPrice {
		if price < 0 || m == "" {
			p.addf("[accounting.gpu_hour_price] %q = %v: give a GPU model and a price of 0 or more per GPU-hour", m, price)
		}
	}

	c.validateAuth(&p)
	c.validateHA(&p)
	c.Limits.validate(&p)

	accounts := c.validateAccounts(&p)
	c.validatePartitions(&p, accounts)
	c.validateQOS(&p)
	c.validatePower(&p)
	if c.DefaultAccount != "" && !accounts[c.DefaultAccount] {
		p.addf("default_account: %q is not an [[account]] (have %s)", c.DefaultAccount, quoteList(keys(accounts)))
	}
	return p.err()
}

var secretEnvPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$`)

func (c Controller) validateAuth(p *problems) {
	a := c.Auth
	if a.ClusterName == "" || strings.ContainsAny(a.ClusterName, " \t/") {
		p.addf("[auth] cluster_name: %q must be a non-empty name without spaces or '/'", a.ClusterName)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		p.addf("[auth] tls_cert and tls_key: set both (your own certificate) or neither (generated)")
	}
	for _, f := range []struct{ key, v string }{{"tls_cert", a.TLSCert}, {"tls_key", a.TLSKey}, {"token_key", a.TokenKey}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			p.addf("[auth] %s: %q must be an absolute path", f.key, f.v)
		}
	}
	p.duration("[auth] clock_skew", a.ClockSkew, false)
	if d := a.ClockSkew.Std(); d > time.Hour {
		p.addf("[auth] clock_skew: %s is over 1h; fix the clocks (NTP) instead", a.ClockSkew)
	}
	for _, h := range a.TLSHosts {
		if h == "" || strings.ContainsAny(h, " /:") && net.ParseIP(h) == nil {
			p.addf("[auth] tls_hosts: %q is not a host name or IP address", h)
		}
	}
	for _, l := range []struct {
		key   string
		names []string
	}{{"operators", a.Operators}, {"admins", a.Admins}} {
		for _, n := range l.names {
			if strings.TrimSpace(n) == "" || strings.ContainsAny(n, " ,:") {
				p.addf("[auth] %s: %q is not a user name", l.key, n)
			}
		}
	}
	for _, v := range a.SecretEnv {
		if !secretEnvPattern.MatchString(v) {
			p.addf("[auth] secret_env: %q is not a variable name or a prefix ending in '*' (e.g. \"AWS_SECRET_ACCESS_KEY\", \"VAULT_*\")", v)
		}
	}
	for _, sn := range a.RevokedNodeCerts {
		if _, ok := auth.ParseSerial(sn); !ok {
			p.addf("[auth] revoked_node_certs: %q is not a certificate serial number (hex digits, colons allowed)", sn)
		}
	}
	if c.API.SubmitRate < 0 {
		p.addf("[api] submit_rate: %g must not be negative (0 = no limit)", c.API.SubmitRate)
	}
	if c.API.SubmitRate > 0 && c.API.SubmitBurst < 1 {
		p.addf("[api] submit_burst: %d must be at least 1 when submit_rate is set", c.API.SubmitBurst)
	}
	if c.API.RefusalRate < 0 || c.API.RefusalRate > 1e6 {
		p.addf("[api] refusal_rate: %g is out of range; give 0 (no slow-down) to 1000000 refusals a second", c.API.RefusalRate)
	}
	if c.API.RefusalRate > 0 && (c.API.RefusalBurst < 1 || c.API.RefusalBurst > 1<<20) {
		p.addf("[api] refusal_burst: %d must be from 1 to %d when refusal_rate is set", c.API.RefusalBurst, 1<<20)
	}
	for _, d := range []struct {
		key    string
		v      Duration
		lo, hi Duration
	}{{"read_timeout", c.API.ReadTimeout, "1s", "1h"}, {"idle_timeout", c.API.IdleTimeout, "1s", "1h"},
		{"write_timeout", c.API.WriteTimeout, "10s", "24h"}} {
		p.duration("[api] "+d.key, d.v, true)
		if v := d.v.Std(); v != 0 && (v < d.lo.Std() || v > d.hi.Std()) {
			p.addf("[api] %s: %s is out of range; give %s to %s", d.key, d.v, d.lo, d.hi)
		}
	}
	for _, n := range []struct {
		key    string
		v, min int
	}{{"max_conns_per_user", c.API.MaxConnsPerUser, 1}, {"max_conns_per_ip", c.API.MaxConnsPerIP, 1}, {"max_conns", c.API.MaxConns, 0}} {
		if n.v < n.min || n.v > 1<<20 {
			p.addf("[api] %s: %d is out of range; give %d to %d", n.key, n.v, n.min, 1<<20)
		}
	}
	if c.API.MaxConns > 0 && c.API.MaxConns < max(c.API.MaxConnsPerUser, c.API.MaxConnsPerIP) {
		p.addf("[api] max_conns: %d is below a per-user or per-address cap; raise it or set 0 (three quarters of the open-file limit)", c.API.MaxConns)
	}
	for _, e := range c.API.ConnLimitExempt {
		if _, err := netip.ParsePrefix(e); err != nil {
			p.addf("[api] conn_limit_exempt: %q is not a network; write it as CIDR (10.1.0.0/16, fd00::/8, 10.1.2.3/32)", e)
		}
	}
}

func (c Controller) validatePartitions(p *problems, accounts map[string]bool) {
	qos := map[string]bool{}
	for _, q := range c.QOS {
		qos[q.Name] = true
	}
	if len(c.Partitions) == 0 {
		p.addf("[[partition]]: none defined; define at least one")
		return
	}
	seen := map[string]bool{}
	defaults := 0
	for i, part := range c.Partitions {
		key := itemKey("partition", i, part.Name)
		p.name(key, part.Name, seen)
		if part.Default {
			defaults++
		}
		if len(part.Nodes) == 0 {
			p.addf("%s nodes: empty; list node names or use [\"ALL\"]", key)
		}
		if slices.Contains(part.Nodes, AllNodes) && len(part.Nodes) > 1 {
			p.addf("%s nodes: \"ALL\" must be the only entry", key)
		}
		for _, n := range part.Nodes {
			if strings.TrimSpace(n) == "" || strings.ContainsAny(n, " ,") {
				p.addf("%s nodes: %q is not a node name", key, n)
			}
		}
		p.duration(key+" default_time", part.DefaultTime, false)
		p.duration(key+" max_time", part.MaxTime, false)
		if dt, mt := part.DefaultTime.Std(), part.MaxTime.Std(); mt > 0 && (dt == 0 || dt > mt) {
			p.addf("%s default_time: %q exceeds max_time %q", key, part.DefaultTime, part.MaxTime)
		}
		if part.PriorityTier < 0 {
			p.addf("%s priority_tier: %d must not be negative", key, part.PriorityTier)
		}
		for _, l := range []struct {
			key   string
			names []string
			known map[string]bool
			what  string
		}{{"allow_accounts", part.AllowAccounts, accounts, "an [[account]]"}, {"deny_accounts", part.DenyAccounts, accounts, "an [[account]]"},
			{"allow_qos", part.AllowQOS, qos, "a [[qos]]"}, {"deny_qos", part.DenyQOS, qos, "a [[qos]]"}} {
			for _, n := range l.names {
				if !l.known[n] {
					p.addf("%s %s: %q is not %s (have %s)", key, l.key, n, l.what, quoteList(keys(l.known)))
				}
			}
		}
		if len(part.AllowAccounts) > 0 && len(part.DenyAccounts) > 0 {
			p.addf("%s deny_accounts: set together with allow_accounts; give one of them (allow_accounts lists every account that may use the partition)", key)
		}
		if len(part.AllowQOS) > 0 && len(part.DenyQOS) > 0 {
			p.addf("%s deny_qos: set together with allow_qos; give one of them (allow_qos lists every QOS that may use the partition)", key)
		}
		for _, g := range part.AllowGroups {
			if strings.TrimSpace(g) == "" || strings.ContainsAny(g, " ,:") {
				p.addf("%s allow_groups: %q is not a group name", key, g)
			}
		}
		if part.State != "" && part.State != PartitionUp && part.State != PartitionDown {
			p.addf("%s state: %q is not allowed (use \"UP\" or \"DOWN\")", key, part.State)
		}
		if part.StartGate != "" && !slices.Contains(StartGates, part.StartGate) {
			p.addf("%s start_gate: %q is not a start gate (use %s)", key, part.StartGate, quoteList(StartGates))
		}
		if part.Placement != "" && !slices.Contains(Placements, part.Placement) {
			p.addf("%s placement: %q is not a placement (use %s)", key, part.Placement, quoteList(Placements))
		}
		part.IdlePolicy.validate(p, key)
	}
	if defaults != 1 {
		p.addf("[[partition]] default: %d partitions are marked default = true; mark exactly one", defaults)
	}
}

func (c Controller) validateQOS(p *problems) {
	names := map[string]bool{}
	for _, q := range c.QOS {
		names[q.Name] = true
	}
	seen := map[string]bool{}
	for i, q := range c.QOS {
		key := itemKey("qos", i, q.Name)
		p.name(key, q.Name, seen)
		if q.Priority < 0 {
			p.addf("%s priority: %d must not be negative", key, q.Priority)
		}
		if q.MaxGPUsPerUser < 0 {
			p.addf("%s max_gpus_per_user: %d must not be negative (0 = no limit)", key, q.MaxGPUsPerUser)
		}
		if q.MaxJobsPerUser < 0 {
			p.addf("%s max_jobs_per_user: %d must not be negative (0 = no limit)", key, q.MaxJobsPerUser)
		}
		if q.MaxSubmitJobsPerUser < 0 {
			p.addf("%s max_submit_jobs_per_user: %d must not be negative (0 = [limits] max_submit_jobs_per_user)", key, q.MaxSubmitJobsPerUser)
		}
		p.duration(key+" max_wall", q.MaxWall, false)
		if !slices.Contains(preemptModes, q.PreemptMode) {
			p.addf("%s preempt_mode: %q is not allowed (use %s)", key, q.PreemptMode, quoteList(preemptModes))
		}
		for _, v := range q.Preempt {
			switch {
			case !names[v]:
				p.addf("%s preempt: %q is not a [[qos]] (have %s)", key, v, quoteList(keys(names)))
			case v == q.Name:
				p.addf("%s preempt: a QOS cannot preempt itself", key)
			}
		}
		if len(q.Preempt) > 0 && q.PreemptMode == PreemptOff {
			p.addf("%s preempt_mode: \"off\" but preempt lists %s; choose requeue, cancel or checkpoint, or empty preempt", key, quoteList(q.Preempt))
		}
		q.IdlePolicy.validate(p, key)
	}
	if len(c.QOS) == 0 {
		p.addf("[[qos]]: none defined; define at least one and name it in default_qos")
	}
	if !names[c.DefaultQOS] {
		p.addf("default_qos: %q is not a [[qos]] (have %s)", c.DefaultQOS, quoteList(keys(names)))
	}
}

// validateAccounts checks the account tree and returns the set of names.
func (c Controller) validateAccounts(p *problems) map[string]bool {
	names := map[string]bool{}
	parent := map[string]string{}
	for _, a := range c.Accounts {
		names[a.Name] = true
		parent[a.Name] = a.Parent
	}
	seen := map[string]bool{}
	for i, a := range c.Accounts {
		key := itemKey("account", i, a.Name)
		p.name(key, a.Name, seen)
		if a.Name == RootAccount {
			p.addf("%s name: %q is the implicit root; give top-level accounts no parent", key, a.Name)
		}
		if a.Parent != "" && a.Parent != RootAccount && !names[a.Parent] {
			p.addf("%s parent: %q is not an [[account]] (have %s)", key, a.Parent, quoteList(keys(names)))
		}
		if a.Shares < 1 {
			p.addf("%s shares: %d must be at least 1", key, a.Shares)
		}
		for _, l := range []struct {
			k string
			v int
		}{{"max_gpus", a.MaxGPUs}, {"max_jobs", a.MaxJobs}, {"max_submit_jobs", a.MaxSubmitJobs}, {"max_submit_jobs_per_user", a.MaxSubmitJobsPerUser}} {
			if l.v < 0 {
				p.addf("%s %s: %d must not be negative (0 = no limit)", key, l.k, l.v)
			}
		}
		for _, q := range a.AllowQOS {
			if !slices.ContainsFunc(c.QOS, func(x QOS) bool { return x.Name == q }) {
				p.addf("%s allow_qos: %q is not a [[qos]] (have %s)", key, q, quoteList(qosNames(c.QOS)))
			}
		}
		p.duration(key+" max_wall", a.MaxWall, false)
		p.duration(key+" budget_period", a.BudgetPeriod, false)
		if a.MaxGPUHours < 0 || math.IsNaN(a.MaxGPUHours) || math.IsInf(a.MaxGPUHours, 0) {
			p.addf("%s max_gpu_hours: %g must be a number >= 0 (0 = no budget)", key, a.MaxGPUHours)
		}
		// Walk up; a walk longer than the number of accounts is a cycle.
		for cur, n := a.Parent, 0; cur != "" && cur != RootAccount && names[cur]; cur, n = parent[cur], n+1 {
			if n > len(c.Accounts) || cur == a.Name {
				p.addf("%s parent: %q makes a cycle in the account tree", key, a.Parent)
				break
			}
		}
	}
	return names
}

// name checks an array-table entry's name: present, unique, no spaces.
func (p *problems) name(key, name string, seen map[string]bool) {
	switch {
	case name == "":
		p.addf("%s name: missing", key)
	case strings.ContainsAny(name, " \t,=:/"):
		p.addf("%s name: %q may not contain spaces, ',', '=', ':' or '/'", key, name)
	case seen[name]:
		p.addf("%s name: %q is defined twice", key, name)
	}
	seen[name] = true
}

// itemKey names the i-th [[table]] by its name, or its position when it
// has none.
func itemKey(table string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("[[%s]] #%d", table, i+1)
	}
	return fmt.Sprintf("[[%s]] %q", table, name)
}

func qosNames(qs []QOS) []string {
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func quoteList(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
