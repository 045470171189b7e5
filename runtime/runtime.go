package runtime

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"time"
)

// ErrNotFound is returned when no task or container has the given ID.
var ErrNotFound = errors.New("task not found")

// ErrIDInUse is returned by Start when the engine still holds state for
// the ID that cannot be cleared (e.g. a task a kill -9 left half-created).
// The caller should start under a fresh ID.
var ErrIDInUse = errors.New("container ID held by stale engine state")

// ErrNoCwd is returned by Exec when the process cannot enter its working
// directory in the container (it is not there, or not the user's to
// enter).
var ErrNoCwd = errors.New("working directory not available in the container")

// ImageHost selects the node's own root filesystem (read-only) as a job's
// root: what a Slurm user expects, with the host's tools and libraries.
const ImageHost = "host"

// ShellPath is the shell every job's root must provide: a job's process
// runs under it, its output redirected (WrapperArgs).
const ShellPath = "/bin/sh"

// WrapperArgs is args run by ShellPath with its output appended to
// stdoutPath and stderrPath (equal: one merged file; "": not redirected):
// a job container's process (ocispec.WithShellWrapper), or what a
// prepared container's launcher execs.
func WrapperArgs(args []string, stdoutPath, stderrPath string) []string {
	script := `"$@"`
	if stdoutPath != "" {
		script += " >>" + ShellQuote(stdoutPath)
	}
	switch {
	case stderrPath == "":
	case stderrPath == stdoutPath:
		script += " 2>&1"
	default:
		script += " 2>>" + ShellQuote(stderrPath)
	}
	script += "; exit $?"
	return append([]string{ShellPath, "-c", script, "gpud-job"}, args...)
}

// ShellQuote quotes s for POSIX sh: inside single quotes nothing is
// special except the single quote itself.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Mount is a bind mount into the container, or with Hide an empty tmpfs
// over Dest that keeps what the host has there (daemon state) out of the
// job's view. Mounts apply shallowest Dest first, a Hide before a bind at
// the same depth, so binds below a hidden directory stay visible.
type Mount struct {
	Source   string
	Dest     string
	ReadOnly bool
	// Hide covers Dest with an empty root-owned tmpfs (Source unused).
	Hide bool
}

// TaskConfig describes one job container on one node. The node agent fills
// it from an allocation; the runtime turns it into an OCI spec.
type TaskConfig struct {
	// ID is the container ID: unique per allocation attempt and node.
	ID string
	// Labels are stored on the container so a restarted agent can find and
	// re-adopt it (job id, alloc id, user, start time, deadline).
	Labels map[string]string
	// Image is ImageHost or an image reference known to containerd.
	Image string
	// ReadOnlyRoot makes an image's root filesystem read-only (the
	// host's always is).
	ReadOnlyRoot bool
	// Args is the process to run; Args[0] must exist inside the root.
	Args     []string
	Env      []string // applied last: wins over anything CDI injects
	Cwd      string
	UID, GID uint32
	// AdditionalGIDs are the user's supplementary groups.
	AdditionalGIDs []uint32
	Hostname       string
	Mounts         []Mount
	// HostRootReadOnly, on ImageHost, makes the host's root read-only in
	// the job (node.toml host_root = "read-only"): only Mounts are
	// writable. By default the job writes where its uid may, as a Slurm
	// job does on its node.
	HostRootReadOnly bool
	// CPUs limits CPU time (in cores; 0 = unlimited). MemoryBytes limits
	// memory (0 = unlimited); exceeding it ends the task OOM-killed.
	CPUs        float64
	MemoryBytes int64
	// CPUSet pins the task to these cores ("0-3,8"; empty: any) and
	// CPUMems to these memory nodes (empty: any).
	CPUSet  string
	CPUMems string
	// CDIDevices are fully qualified CDI names ("nvidia.com/gpu=GPU-...")
	// resolved against the runtime's CDI spec directories.
	CDIDevices []string
	// StdoutPath and StderrPath are host files the task's output is
	// appended to, owned by UID/GID; equal paths mean one merged file. The
	// files are written without the agent in the path, so output survives
	// an agent restart.
	StdoutPath string
	StderrPath string
	// TruncateOutput empties the output files before the task starts
	// (sbatch's --open-mode=truncate, its default, on a job's first
	// start); otherwise output is appended to what they hold.
	TruncateOutput bool
}

// ExitStatus is how a task ended.
type ExitStatus struct {
	Code int
	// Signal is the signal that killed the task, 0 if it exited.
	Signal syscall.Signal
	// OOMKilled is true when the kernel's OOM killer ended the task.
	OOMKilled bool
	ExitedAt  time.Time
}

// TaskStatus is what List reports about one container.
type TaskStatus string

// Task statuses.
const (
	StatusCreated TaskStatus = "created" // container exists, task never started
	StatusRunning TaskStatus = "running"
	StatusExited  TaskStatus = "exited"
	StatusUnknown TaskStatus = "unknown"
)

// TaskInfo describes an existing container.
type TaskInfo struct {
	ID     string
	Labels map[string]string
	Status TaskStatus
	// Exit is set when Status is StatusExited.
	Exit *ExitStatus
}

// Runtime runs job containers. All methods honour ctx cancellation and are
// safe for concurrent use on different IDs.
type Runtime interface {
	// Start creates the container and starts its task. It fails with an
	// error wrapping os.ErrExist if the ID is already in use.
	Start(ctx context.Context, cfg TaskConfig) error
	// Wait blocks until the task exits and returns its status; it works for
	// tasks started by an earlier agent process, and returns at once for a
	// task that already exited.
	Wait(ctx context.Context, id string) (ExitStatus, error)
	// Signal delivers sig to the task's init process.
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	// Delete removes the task and container. Deleting a missing ID is not
	// an error. A running task is killed first.
	Delete(ctx context.Context, id string) error
	// List returns every container this runtime manages.
	List(ctx context.Context) ([]TaskInfo, error)
}

// Preparer is implemented by runtimes that can make a container ready
// ahead of its job (node.toml prepared_containers): Prepare does all that
// Start does except start the process — the container, its snapshot, its
// shim and the task created (namespaces, cgroup with its limits, mounts,
// devices), the process waiting to be started — and StartPrepared later
// starts it. A prepared container that is never claimed is removed with
// Delete, like any other. Optional, like UsageReader.
type Preparer interface {
	// Prepare creates container cfg.ID and its task without starting
	// the task's process. It creates no output files (cfg.StdoutPath and
	// cfg.StderrPath should be empty: the process that would write them
	// is not the job's yet).
	Prepare(ctx context.Context, cfg TaskConfig) error
	// StartPrepared starts the process of container id, which Prepare
	// made. cfg is the job that claims it: its Labels replace the
	// container's (a label given as "" is removed), and its output files
	// (StdoutPath, StderrPath, TruncateOutput, as the user UID, GID,
	// AdditionalGIDs) are created as Start creates them; the rest of cfg
	// is not read. ErrNotFound says id is not there; an error wrapping
	// os.ErrExist says its process was already started.
	StartPrepared(ctx context.Context, id string, cfg TaskConfig) error
}

// Pauser is implemented by runtimes that can freeze a task's cgroup
// (scontrol suspend): every process of the container stops where it is,
// keeping its memory and devices, until Resume. Both are idempotent.
// Optional, like UsageReader: the node agent type-asserts it.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
}

// TaskUsage is what a task's cgroup has used so far.
type TaskUsage struct {
	// CPUSeconds is CPU time used since the task started.
	CPUSeconds float64
	// MemBytes is memory in use now.
	MemBytes int64
	// MemPeakBytes is the most memory the task's cgroup has used since it
	// started (cgroup v2 memory.peak, v1 memory.max_usage_in_bytes; 0
	// where the kernel keeps none: v2 before Linux 5.19).
	MemPeakBytes int64
}

// UsageReader is implemented by runtimes that can read a running task's
// cgroup usage. It is optional: the node agent type-asserts a Runtime for
// it and samples GPUs only when it is missing.
type UsageReader interface {
	TaskUsage(ctx context.Context, id string) (TaskUsage, error)
}

// ExecConfig is a process to start inside a running container: a step
// task. It runs as the container's user, with its devices, cgroup and
// mounts; Args, Env and Cwd replace the container process's.
type ExecConfig struct {
	// ID names the process within its container (unique while it runs).
	ID   string
	Args []string
	Env  []string
	Cwd  string
	// Stdout and Stderr receive the process's output while the caller
	// holds the Process; nil discards it.
	Stdout, Stderr io.Writer
	// Stdin, when set, is the process's input until it returns EOF; nil
	// gives the process no input.
	Stdin io.Reader
	// Terminal runs the process on a new terminal of Rows x Cols (its
	// stdout and stderr are the terminal's output, sent to Stdout); its
	// Process is then a Resizer.
	Terminal   bool
	Rows, Cols uint16
}

// Process is a process started by Exec.
type Process interface {
	// Wait blocks until the process exits and all its output was copied.
	Wait(ctx context.Context) (ExitStatus, error)
	// Signal delivers sig to the process.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Delete releases the engine's record of an exited process.
	Delete(ctx context.Context) error
}

// Execer is implemented by runtimes that can start processes inside a
// running container (job steps). It is optional, like UsageReader.
type Execer interface {
	Exec(ctx context.Context, containerID string, cfg ExecConfig) (Process, error)
}

// DirChecker is implemented by runtimes that can tell whether a path is
// a directory as a running container's processes see it (its mounts, its
// private /tmp), without starting anything in it: a step whose working
// directory the job cannot see starts elsewhere, as slurmstepd does.
type DirChecker interface {
	// ContainerDir returns nil if path is a directory in container id,
	// else an error wrapping the reason's errno (ENOENT, ENOTDIR).
	ContainerDir(ctx context.Context, id, path string) error
}

// Resizer is a Process on a terminal (ExecConfig.Terminal).
type Resizer interface {
	Resize(ctx context.Context, rows, cols uint16) error
}

// ExecAttacher is implemented by runtimes whose exec'd processes outlive
// the caller: a restarted node agent finds a step's task again by its
// exec ID, with its further output going to cfg.Stdout and cfg.Stderr
// (nil: not read) and cfg.Stdin, when set, to its input (only Stdin,
// Stdout and Stderr of cfg count). ErrNotFound says the process is gone.
type ExecAttacher interface {
	AttachExec(ctx context.Context, containerID, execID string, cfg ExecConfig) (Process, error)
}
