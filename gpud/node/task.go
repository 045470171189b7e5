package node

import (
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

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

// patternVars are the values output patterns expand to.
type patternVars struct {
	JobID       spec.JobID
	Name        string
	User        string
	ArrayJobID  spec.JobID // 0: not an array task
	ArrayTaskID int
	Node        string
	Rank        int
}

// noArrayTask is what Slurm's %a expands to for a job that is not an
// array task (NO_VAL); kept for scripts that parse it.
const noArrayTask = "4294967294"

// expandPattern expands Slurm's filename pattern letters: %j and %J job
// id, %s step ("batch"), %x job name, %u user, %a array task id, %A array
// job id, %N node name, %n node rank, %t task id (the rank: one task per
// node), %% a percent sign. A width between % and the letter
// zero-pads numbers (%4a → 0007), as in sbatch. Unknown letters are kept
// as written.
func expandPattern(p string, v patternVars) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+1 == len(p) {
			b.WriteByte(p[i])
			continue
		}
		j := i + 1
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == len(p) {
			b.WriteString(p[i:])
			break
		}
		width, _ := strconv.Atoi(p[i+1 : j])
		num := func(n uint64) string {
			s := strconv.FormatUint(n, 10)
			if len(s) < width {
				s = strings.Repeat("0", width-len(s)) + s
			}
			return s
		}
		switch p[j] {
		case '%':
			b.WriteByte('%')
		case 'j', 'J':
			// %J is jobid.stepid; the batch script is the job's own
			// output, so it is the job id (as sbatch writes it).
			b.WriteString(num(uint64(v.JobID)))
		case 's':
			b.WriteString("batch")
		case 't':
			// The task id: gpud runs one task per node, so its rank.
			b.WriteString(num(uint64(v.Rank)))
		case 'x':
			b.WriteString(v.Name)
		case 'u':
			b.WriteString(v.User)
		case 'a':
			if v.ArrayJobID == 0 {
				b.WriteString(noArrayTask)
			} else {
				b.WriteString(num(uint64(v.ArrayTaskID)))
			}
		case 'A':
			if v.ArrayJobID == 0 {
				b.WriteString(num(uint64(v.JobID)))
			} else {
				b.WriteString(num(uint64(v.ArrayJobID)))
			}
		case 'N':
			b.WriteString(v.Node)
		case 'n':
			b.WriteString(num(uint64(v.Rank)))
		default:
			b.WriteString(p[i : j+1])
		}
		i = j
	}
	return b.String()
}

// outputPaths resolves a job's stdout and stderr files on this node.
func outputPaths(job *spec.Job, node string, rank int) (stdout, stderr string) {
	v := patternVars{JobID: job.ID, Name: job.Name, User: job.User, ArrayJobID: job.ArrayJobID,
		ArrayTaskID: job.ArrayTaskID, Node: node, Rank: rank}
	out := job.Output
	if out == "" {
		out = "gpud-%j.out"
		if job.ArrayJobID != 0 {
			out = "gpud-%A_%a.out"
		}
	}
	resolve := func(p string) string {
		p = expandPattern(p, v)
		if p == os.DevNull {
			return "" // -o /dev/null discards, as in Slurm
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(job.WorkDir, p)
		}
		return filepath.Clean(p)
	}
	stdout = resolve(out)
	stderr = stdout
	if job.Error != "" {
		stderr = resolve(job.Error)
	}
	return stdout, stderr
}

// masterPort derives a port for MASTER_PORT from the job id: the same on
// every rank without talking, in 20000–29999 (below Linux's ephemeral
// range, so outgoing connections do not take it first).
func masterPort(id spec.JobID) int { return 20000 + int(uint64(id)%10000) }

// taskInput is everything buildTask needs, gathered by the runner.
type taskInput struct {
	Asg          api.Assignment
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
	RestartDir   string // newest sealed checkpoint, "" if none
	GroupIDs     []uint32
	Deadline     time.Time
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
}

// buildTask turns an assignment into the container to run.
func buildTask(in taskInput) (runtime.TaskConfig, error) {
	job, alloc, self := &in.Asg.Job, &in.Asg.Alloc, in.Self
	nodes := slices.Clone(alloc.Nodes)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Rank < nodes[j].Rank })
	names := make([]string, len(nodes))
	master := in.SelfAddr
	for i, n := range nodes {
		names[i] = n.Node
		if i == 0 && n.Node != in.NodeName {
			master = n.Addr
			if master == "" {
				master = n.Node
			}
		}
	}
	nodeList := strings.Join(names, ",")
	devs := slices.Clone(self.GPUs)
	var cdi []string
	for _, m := range in.MIG {
		devs = append(devs, m.UUID)
		if m.CDIName != "" {
			cdi = append(cdi, m.CDIName)
		}
	}
	gpus := strings.Join(devs, ",")
	for _, u := range self.GPUs {
		g, ok := in.GPUs[u]
		if !ok {
			return runtime.TaskConfig{}, fmt.Errorf("GPU %s of alloc %s is not in this node's inventory; the controller and node disagree, re-register the node", u, alloc.ID)
		}
		if g.CDIName != "" {
			cdi = append(cdi, g.CDIName)
		}
	}
	for _, name := range self.NICs {
		n, ok := in.NICs[name]
		if !ok || n.CDIName == "" {
			return runtime.TaskConfig{}, fmt.Errorf("RDMA NIC %s of alloc %s is not usable on this node; the controller and node disagree, re-register the node", name, alloc.ID)
		}
		cdi = append(cdi, n.CDIName)
	}
	visible := gpus
	if visible == "" {
		visible = "void"
	}
	// CUDA_VISIBLE_DEVICES as Slurm sets it in a job whose devices are
	// constrained: indices into the devices the container sees (it sees
	// only its own, 0..n-1); the UUIDs stay in GPUD_GPUS. MIG slices keep
	// their MIG UUIDs, which select the slice whatever CUDA enumerates.
	cudaVisible := gpus
	if len(in.MIG) == 0 && len(self.GPUs) > 0 {
		idx := make([]string, len(self.GPUs))
		for i := range idx {
			idx[i] = strconv.Itoa(i)
		}
		cudaVisible = strings.Join(idx, ",")
	}
	stdout, stderr := outputPaths(job, in.NodeName, self.Rank)
	// The batch script runs once, on the first node (step "batch"); the
	// other nodes hold their share and run steps' tasks only (step.go).
	// An interactive allocation (srun or salloc outside a job) runs no
	// script: every node holds, and steps come from outside.
	batch := self.Rank == 0 && !job.Interactive
	if !batch {
		stdout, stderr = "", ""
	}

	id := strconv.FormatUint(uint64(job.ID), 10)
	rank := strconv.Itoa(self.Rank)
	nn := strconv.Itoa(len(nodes))
	ours := []string{
		"GPUD_JOB_ID=" + id,
		"GPUD_NODELIST=" + nodeList,
		"GPUD_NODEID=" + rank,
		"GPUD_NNODES=" + nn,
		"GPUD_GPUS=" + gpus,
		"GPUD_CHECKPOINT_DIR=" + filepath.Join(in.CkptDir, "staging"),
		"GPUD_RESTART_DIR=" + in.RestartDir,
		"MASTER_ADDR=" + master,
		"MASTER_PORT=" + strconv.Itoa(masterPort(job.ID)),
		"WORLD_SIZE=" + nn,
		"NODE_RANK=" + rank,
		"SLURM_JOB_ID=" + id,
		"SLURM_JOB_NODELIST=" + hostlist.Compress(names),
		"SLURM_NODELIST=" + hostlist.Compress(names),
		"SLURM_NODEID=" + rank,
		"SLURM_NNODES=" + nn,
		"SLURM_JOB_NUM_NODES=" + nn,
		"SLURM_SUBMIT_DIR=" + job.SubmitDir,
		"SLURM_JOB_NAME=" + job.Name,
		"SLURM_JOB_USER=" + job.User,
		"SLURM_JOB_PARTITION=" + job.Partition,
		"SLURM_CPUS_ON_NODE=" + strconv.Itoa(self.CPUs),
		"SLURM_MEM_PER_NODE=" + strconv.FormatInt(self.MemMiB, 10),
		// Requeues and preemptions so far: a script can tell a rerun.
		"SLURM_RESTART_COUNT=" + strconv.Itoa(max(alloc.Attempt-1, 0)),
		"CUDA_VISIBLE_DEVICES=" + cudaVisible,
		"NVIDIA_VISIBLE_DEVICES=" + visible,
		"SLURMD_NODENAME=" + in.NodeName,
		"SLURM_GPUS_ON_NODE=" + strconv.Itoa(len(devs)),
		api.EnvStepSocket + "=" + filepath.Join(in.JobDir, stepSocketName),
	}
	if in.ToolsDir != "" {
		path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		for _, kv := range job.Env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				path = v
			}
		}
		ours = append(ours, "PATH="+in.ToolsDir+":"+path)
	}
	if f := self.GPUFraction; f > 0 && f < 1 && len(self.GPUs) == 1 {
		// A share of one GPU: best-effort isolation through CUDA MPS. The
		// MPS client honours a compute share and a pinned device memory
		// cap, but only when an MPS control daemon serves the GPU and the
		// program does not override these variables; nothing here stops a
		// job that bypasses MPS from using the whole device.
		ours = append(ours, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.Itoa(int(math.Round(f*100))))
		if g := in.GPUs[self.GPUs[0]]; g.MemMiB > 0 {
			ours = append(ours, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+self.GPUs[0]+"="+
				strconv.FormatInt(int64(math.Floor(f*float64(g.MemMiB))), 10)+"M")
		}
	}
	// The job's task layout, as sbatch sets it; srun takes its defaults
	// from these.
	if t := job.Tasks; t.NTasks > 0 || t.NTasksPerNode > 0 {
		nt := t.NTasks
		if nt == 0 {
			nt = t.NTasksPerNode * len(nodes)
		}
		ours = append(ours, "SLURM_NTASKS="+strconv.Itoa(nt), "SLURM_NPROCS="+strconv.Itoa(nt))
		if t.NTasksPerNode > 0 {
			ours = append(ours, "SLURM_NTASKS_PER_NODE="+strconv.Itoa(t.NTasksPerNode))
		}
		if l, err := stepLayout(nodes, api.StepRequest{NTasks: nt, NTasksPerNode: t.NTasksPerNode}); err == nil {
			ours = append(ours, "SLURM_TASKS_PER_NODE="+tasksPerNode(l))
		}
	}
	if t := job.Tasks; t.CPUsPerTask > 0 {
		ours = append(ours, "SLURM_CPUS_PER_TASK="+strconv.Itoa(t.CPUsPerTask))
	}
	if t := job.Tasks; t.GPUsPerTask > 0 {
		ours = append(ours, "SLURM_GPUS_PER_TASK="+strconv.Itoa(t.GPUsPerTask))
	}
	if g := job.Resources.GPUsPerNode; g > 0 {
		ours = append(ours, "SLURM_GPUS_PER_NODE="+strconv.Itoa(g))
	}
	if len(self.NICs) > 0 {
		// NCCL uses exactly these HCAs (and the locked-memory limit is
		// unlimited for every job: runtime/ocispec).
		ours = append(ours, "NCCL_IB_HCA="+strings.Join(self.NICs, ","))
	}
	if job.ArrayJobID != 0 {
		tid := strconv.Itoa(job.ArrayTaskID)
		ours = append(ours,
			"GPUD_ARRAY_TASK_ID="+tid,
			"SLURM_ARRAY_TASK_ID="+tid,
			"SLURM_ARRAY_JOB_ID="+strconv.FormatUint(uint64(job.ArrayJobID), 10))
	}

	var mounts []runtime.Mount
	seen := map[string]bool{}
	rw := func(src, dst string) {
		if src == "" || seen[src+"\x00"+dst] {
			return
		}
		seen[src+"\x00"+dst] = true
		mounts = append(mounts, runtime.Mount{Source: src, Dest: dst})
	}
	image := job.Image
	if image == "" {
		image = in.DefaultImage
	}
	// The user names these; the node adds the rest.
	userDirs := []string{job.WorkDir, job.SubmitDir}
	for _, p := range []string{stdout, stderr} {
		if p != "" { // "": discarded (-o /dev/null)
			userDirs = append(userDirs, filepath.Dir(p))
		}
	}
	if job.UID != 0 {
		for _, d := range userDirs {
			if h := insideAny(d, in.Hide); h != "" {
				return runtime.TaskConfig{}, spec.Errorf(spec.ErrInvalid,
					"directory %s of job %d is inside %s, gpud's state, which jobs may not see; use a work, submit and output directory elsewhere", d, job.ID, h)
			}
		}
	}
	if image == runtime.ImageHost {
		// Only a job on the host's root sees the host's files.
		for _, h := range in.Hide {
			mounts = append(mounts, runtime.Mount{Dest: h, Hide: true})
		}
		for _, p := range in.Show {
			if insideAny(p, in.Hide) != "" {
				rw(p, p)
			}
		}
	}
	if image == runtime.ImageHost {
		for _, m := range in.Mounts {
			if insideAny(m, in.Hide) == "" {
				rw(m, m)
			}
		}
		if in.Home != "" && in.Home != "/" && insideAny(in.Home, in.Hide) == "" {
			rw(in.Home, in.Home)
		}
	}
	for _, d := range userDirs[:2] {
		rw(d, d)
	}
	rw(in.JobDir, in.JobDir)
	rw(filepath.Join(in.JobDir, "tmp"), "/tmp")
	for _, d := range userDirs[2:] {
		rw(d, d)
	}
	rw(in.CkptDir, in.CkptDir)
	if in.ToolsDir != "" && !seen[in.ToolsDir+"\x00"+in.ToolsDir] {
		mounts = append(mounts, runtime.Mount{Source: in.ToolsDir, Dest: in.ToolsDir, ReadOnly: true})
	}

	args := append(scriptArgs(job.Script, in.ScriptPath), job.Args...)
	if !batch {
		args = []string{"/bin/sh", "-c", holderScript}
	}
	deadline := ""
	if !in.Deadline.IsZero() {
		deadline = in.Deadline.UTC().Format(time.RFC3339Nano)
	}
	return runtime.TaskConfig{
		ID: in.ContainerID,
		Labels: map[string]string{
			LabelNode:     in.NodeName,
			LabelJob:      id,
			LabelAlloc:    alloc.ID,
			LabelUser:     job.User,
			LabelStart:    allocStart(alloc).UTC().Format(time.RFC3339Nano),
			LabelDeadline: deadline,
		},
		Image:          image,
		Args:           args,
		Env:            mergeEnv(job.Env, ours),
		Cwd:            job.WorkDir,
		UID:            job.UID,
		GID:            job.GID,
		AdditionalGIDs: in.GroupIDs,
		Hostname:       in.Hostname,
		Mounts:         mounts,
		CPUs:           float64(self.CPUs),
		MemoryBytes:    self.MemMiB << 20,
		CPUSet:         in.CPUSet,
		CPUMems:        in.CPUMems,
		CDIDevices:     cdi,
		StdoutPath:     stdout,
		StderrPath:     stderr,
		// Truncate on the first start only (Slurm appends once a job is
		// requeued), and from rank 0 only, so a node starting late cannot
		// empty a file another node already writes.
		TruncateOutput: job.OpenMode != spec.OpenAppend && job.Attempt <= 1 && self.Rank == 0,
	}, nil
}

// scriptArgs runs the script directly when it names its interpreter with
// a #! line, and with /bin/sh otherwise (as sbatch does).
func scriptArgs(script, path string) []string {
	if strings.HasPrefix(script, "#!") {
		return []string{path}
	}
	return []string{"/bin/sh", path}
}

// allocStart is when the allocation began; deadlines count from it.
func allocStart(a *spec.Alloc) time.Time { return a.StartTime.Time }

// mergeEnv returns base then over, where a key in over replaces the same
// key in base (so the variables the agent owns cannot be spoofed by
// --export) and each key appears once.
func mergeEnv(base, over []string) []string {
	key := func(kv string) string { k, _, _ := strings.Cut(kv, "="); return k }
	owned := map[string]bool{}
	for _, kv := range over {
		owned[key(kv)] = true
	}
	out := make([]string, 0, len(base)+len(over))
	dup := map[string]int{}
	for _, kv := range base {
		k := key(kv)
		if owned[k] {
			continue
		}
		if i, ok := dup[k]; ok {
			out[i] = kv // last one wins, as in a shell
			continue
		}
		dup[k] = len(out)
		out = append(out, kv)
	}
	return append(out, over...)
}

// insideAny returns the entry of dirs that p is (lexically, or after
// resolving symlinks in p) equal to or below, or "".
func insideAny(p string, dirs []string) string {
	if p == "" {
		return ""
	}
	p = filepath.Clean(p)
	cands := []string{p}
	// Resolve the longest existing prefix: runc follows symlinks in a
	// bind's source, and the rest need not exist yet.
	for dir, rest := p, ""; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			cands = append(cands, filepath.Join(real, rest))
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir, rest = parent, filepath.Join(filepath.Base(dir), rest)
	}
	for _, d := range dirs {
		for _, c := range cands {
			if rel, err := filepath.Rel(d, c); err == nil && filepath.IsLocal(rel) || c == d {
				return d
			}
		}
	}
	return ""
}

// hiddenPaths turns the directories to hide into the list to mount: clean,
// existing directories, none below another.
func hiddenPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			continue
		}
		p = filepath.Clean(p)
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue // nothing there to hide (and no mount point for it)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(p string) bool {
		return insideAny(p, slices.DeleteFunc(slices.Clone(out), func(q string) bool { return q == p })) != ""
	})
}

// homeDir is uid's home directory on this node when it is an existing
// absolute directory other than /, else "".
func homeDir(uid uint32) string {
	u := users.lookup(uid)
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
	u := users.lookup(uid)
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
