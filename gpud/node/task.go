package node

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// A job's container on this node (conversion [8] of docs/architecture.md)
// is built by named builders, one concern each, in files of their own
// (as Nomad's task runner hooks): its devices (taskdevices.go), its
// output files (taskoutputs.go), its mounts (taskmounts.go), its
// environment (taskenv.go) and its command (taskargs.go). buildTask
// composes them; each is a pure function of taskInput (and the results
// of those before it) with its own table tests.

// Container labels. The agent only ever touches containers whose LabelNode
// is its own name: several agents share one containerd in standalone mode.
const (
	LabelNode     = "gpud.node"
	LabelJob      = "gpud.job"
	LabelAlloc    = "gpud.alloc"
	LabelUser     = "gpud.user"
	LabelStart    = "gpud.start"    // RFC 3339, the allocation's start
	LabelDeadline = "gpud.deadline" // RFC 3339, empty when no time limit
)

// maxContainerID keeps IDs well inside containerd's limit (76 bytes).
const maxContainerID = 76

// ContainerID is the container ID of a job attempt on a node,
// gpud-<jobid>-<attempt>-<node>, reduced to containerd's ID charset
// ([A-Za-z0-9] runs joined by single '.', '_' or '-').
func ContainerID(job spec.JobID, attempt int, node string) string {
	raw := fmt.Sprintf("gpud-%d-%d-%s", job, attempt, node)
	var b strings.Builder
	sep := false // last written byte was a separator
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		switch {
		case alnum:
			b.WriteByte(c)
			sep = false
		case !sep && b.Len() > 0:
			if c == '.' || c == '_' {
				b.WriteByte(c)
			} else {
				b.WriteByte('-')
			}
			sep = true
		}
	}
	id := strings.TrimRight(b.String(), "._-")
	if len(id) > maxContainerID {
		// Keep it unique: a long node name is cut and a hash of the full
		// name appended.
		h := fnv.New32a()
		h.Write([]byte(raw))
		suffix := fmt.Sprintf("-%08x", h.Sum32())
		id = strings.TrimRight(id[:maxContainerID-len(suffix)], "._-") + suffix
	}
	return id
}

// taskInput is everything buildTask needs, gathered by the runner.
type taskInput struct {
	// Asg is the runner's assignment, shared, never changed: a copy
	// would put its 1.5 KiB in every frame that holds a taskInput (the
	// start path's grew the runner's stack at every job).
	Asg          *api.Assignment
	Self         spec.NodeAlloc
	NodeName     string
	Hostname     string
	SelfAddr     string
	DefaultImage string
	GPUs         map[string]spec.GPU // inventory by UUID, for CDI names
	NICs         map[string]spec.NIC // RDMA NICs by name, for CDI names
	MIG          []migDevice         // the job's MIG instances
	CPUSet       string              // cores to pin to ("" = none)
	CPUMems      string
	ContainerID  string
	JobDir       string
	ScriptPath   string
	CkptDir      string // this job's checkpoint directory (staging inside)
	// CkptIsStaging says CkptDir is the staging directory itself (a run
	// directory: checkpoint.PrepareRun).
	CkptIsStaging bool
	RestartDir    string // newest sealed checkpoint, "" if none
	GroupIDs      []uint32
	Deadline      time.Time
	// Hide are the directories of daemon state to keep out of the job's
	// view (see Config.HidePaths); Show the files below them it keeps.
	Hide, Show []string
	// Mounts are the site's shared filesystems that exist on this node,
	// bound read-write into a job on the host's root (node.toml mounts).
	Mounts []string
	// Home is the job user's home directory on this node ("" if none):
	// a job on the host's root gets it read-write, as on a Slurm node
	// (caches such as ~/.cache, pip's and conda's user dirs).
	Home string
	// ToolsDir is Config.ToolsDir ("" = none).
	ToolsDir string
	// PulledImage is the job's image as the runtime stored it when it
	// pulled it ("" if it did not): the normalised reference.
	PulledImage string
	// HostRootReadOnly and SharedTmp are Config's.
	HostRootReadOnly, SharedTmp bool
}

// batch says whether this node runs the batch script: the first node of
// a batch job (step "batch"); the other nodes hold their share and run
// steps' tasks only. An interactive allocation (srun or salloc outside a
// job) runs no script: every node holds, and steps come from outside.
func (in *taskInput) batch() bool { return in.Self.Rank == 0 && !in.Asg.Job.Interactive }

// image is the job's image, the node's default when it names none.
func (in *taskInput) image() string {
	if in.PulledImage != "" {
		return in.PulledImage
	}
	if in.Asg.Job.Image != "" {
		return in.Asg.Job.Image
	}
	return in.DefaultImage
}

// buildTask turns an assignment into the container to run.
func buildTask(in *taskInput) (runtime.TaskConfig, error) {
	job, self := &in.Asg.Job, in.Self
	devs, err := taskDevices(in)
	if err != nil {
		return runtime.TaskConfig{}, err
	}
	out := taskOutputs(in)
	mounts, err := taskMounts(in, out)
	if err != nil {
		return runtime.TaskConfig{}, err
	}
	cwd := job.WorkDir
	if c := job.Container; c != nil && c.WorkDir != "" && in.image() != runtime.ImageHost {
		cwd = c.WorkDir
	}
	return runtime.TaskConfig{
		ReadOnlyRoot:   job.Container != nil && job.Container.ReadOnly,
		ID:             in.ContainerID,
		Labels:         taskLabels(in),
		Image:          in.image(),
		Args:           taskArgs(in),
		Env:            taskEnv(in, devs),
		Cwd:            cwd,
		UID:            job.UID,
		GID:            job.GID,
		AdditionalGIDs: in.GroupIDs,
		Hostname:       in.Hostname,
		Mounts:         mounts,
		// Only ImageHost reads it.
		HostRootReadOnly: in.HostRootReadOnly,
		CPUs:             float64(self.CPUs),
		MemoryBytes:      self.MemMiB << 20,
		CPUSet:           in.CPUSet,
		CPUMems:          in.CPUMems,
		CDIDevices:       devs.cdi,
		StdoutPath:       out.stdout,
		StderrPath:       out.stderr,
		TruncateOutput:   out.truncate,
	}, nil
}

// taskLabels are the container's labels: who it belongs to and when it
// ends, so a restarted agent re-adopts it with the same deadline.
func taskLabels(in *taskInput) map[string]string {
	deadline := ""
	if !in.Deadline.IsZero() {
		deadline = in.Deadline.UTC().Format(time.RFC3339Nano)
	}
	return map[string]string{
		LabelNode:     in.NodeName,
		LabelJob:      strconv.FormatUint(uint64(in.Asg.Job.ID), 10),
		LabelAlloc:    in.Asg.Alloc.ID,
		LabelUser:     in.Asg.Job.User,
		LabelStart:    allocStart(&in.Asg.Alloc).UTC().Format(time.RFC3339Nano),
		LabelDeadline: deadline,
	}
}

// allocStart is when the allocation began; deadlines count from it.
func allocStart(a *spec.Alloc) time.Time { return a.StartTime.Time }

// homeDir is uid's home directory on this node when it is an existing
// absolute directory other than /, else "".
func homeDir(uid uint32) string { return users.lookup(uid).homeDir() }

// homeDir is the entry's home directory when it is an existing absolute
// directory other than /, else "".
func (u userEntry) homeDir() string {
	if u.err != nil || !filepath.IsAbs(u.home) || filepath.Clean(u.home) == "/" {
		return ""
	}
	if fi, err := os.Stat(u.home); err != nil || !fi.IsDir() {
		return ""
	}
	return filepath.Clean(u.home)
}

// existingDirs keeps the paths that are directories on this node.
func existingDirs(paths []string) []string {
	var out []string
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// supplementaryGroups returns uid's groups other than gid, or nil when the
// user is unknown on this node (the job then runs with its primary group).
func supplementaryGroups(uid, gid uint32) ([]uint32, error) {
	return users.lookup(uid).supplementaryGroups(gid)
}

// supplementaryGroups is the entry's groups other than gid.
func (u userEntry) supplementaryGroups(gid uint32) ([]uint32, error) {
	if u.err != nil {
		return nil, u.err
	}
	if u.groupsErr != nil {
		return nil, u.groupsErr
	}
	var out []uint32
	for _, g := range u.groups {
		if g != gid {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
