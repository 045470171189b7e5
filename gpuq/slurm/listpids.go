package slurm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// scontrol listpids [JOBID[.STEPID]|*] [NODENAME], as Slurm's: the
// processes of jobs on the host scontrol runs on, read from the kernel
// (/proc), not from the controller. A job's processes are those in the
// cgroup of its container on this host (gpud-JOB-ATTEMPT-NODE, the node
// agent's ContainerID); each one's step is its SLURM_STEP_ID, else the
// batch step (the batch script's container) or the extern step (a node
// that only holds its share, an srun or salloc allocation). A step's
// tasks are the processes started into the container (their parent is
// outside it: the shim), with SLURM_LOCALID and SLURM_PROCID; the batch
// step's task is the batch script (the first child of the container's
// output wrapper); every other process shows "-" as in Slurm. A process's
// environment is readable by its owner and root only, so another user's
// processes are left out with a note. NODENAME picks one node of a host
// that runs several agents (gpud standalone).

// cgroupCtr finds a gpud container ID in a cgroup path component (cgroupfs
// "gpud-42-1-node1", systemd "....gpud-42-1-node1.scope" and the like).
var cgroupCtr = regexp.MustCompile(`gpud-([0-9]+)-([0-9]+)-([A-Za-z0-9._-]+?)(?:\.scope)?$`)

// procInfo is one process of a job on this host.
type procInfo struct {
	pid, ppid int
	start     uint64 // clock ticks after boot (/proc/PID/stat field 22)
	job       spec.JobID
	attempt   int
	node      string // the container ID's node part
	env       map[string]string
	envOK     bool
}

// jobProcs reads /proc (root, for tests) for the processes in gpud job
// containers.
func jobProcs(root string) ([]procInfo, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", root, err)
	}
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(root, e.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil {
			continue // gone
		}
		p := procInfo{pid: pid}
		found := false
		for _, l := range strings.Split(string(cg), "\n") {
			f := strings.SplitN(l, ":", 3)
			if len(f) != 3 {
				continue
			}
			if m := cgroupCtr.FindStringSubmatch(filepath.Base(f[2])); m != nil {
				id, _ := strconv.ParseUint(m[1], 10, 64)
				p.attempt, _ = strconv.Atoi(m[2])
				p.job, p.node, found = spec.JobID(id), m[3], true
				break
			}
		}
		if !found {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(st)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(rest) < 20 {
			continue
		}
		p.ppid, _ = strconv.Atoi(rest[1])
		p.start, _ = strconv.ParseUint(rest[19], 10, 64)
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			p.envOK = true
			p.env = map[string]string{}
			for _, kv := range strings.Split(string(env), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "SLURM_") {
					p.env[k] = v
				}
			}
		} else if !errors.Is(err, fs.ErrPermission) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// pidRow is one line of listpids.
type pidRow struct {
	pid                int
	job                spec.JobID
	step               string // a number, "batch" or "extern"
	local, global      string // "-" for a process that is not a task
	taskOrder, stepKey int
}

// stepKey orders batch and extern before numbered steps.
func stepKey(step string) int {
	switch step {
	case "batch":
		return -2
	case "extern":
		return -1
	}
	n, _ := strconv.Atoi(step)
	return n
}

// pidRows classifies one container's processes (all of one job on one
// node); batch says the container runs the job's batch script.
func pidRows(ps []procInfo, batch bool) []pidRow {
	in := map[int]bool{}
	for _, p := range ps {
		in[p.pid] = true
	}
	// The batch script: the oldest child of the container's first
	// process (the output wrapper) that belongs to no numbered step.
	script := -1
	if batch {
		var first *procInfo
		for i := range ps {
			if !in[ps[i].ppid] && ps[i].env["SLURM_STEP_ID"] == "" && (first == nil || ps[i].start < first.start) {
				first = &ps[i]
			}
		}
		var oldest *procInfo
		for i := range ps {
			if first != nil && ps[i].ppid == first.pid && ps[i].env["SLURM_STEP_ID"] == "" && (oldest == nil || ps[i].start < oldest.start) {
				oldest = &ps[i]
			}
		}
		if oldest != nil {
			script = oldest.pid
		}
	}
	var rows []pidRow
	for _, p := range ps {
		r := pidRow{pid: p.pid, job: p.job, step: p.env["SLURM_STEP_ID"], local: "-", global: "-", taskOrder: 1 << 30}
		switch {
		case r.step != "":
			if !in[p.ppid] {
				r.local, r.global = cmp.Or(p.env["SLURM_LOCALID"], "-"), cmp.Or(p.env["SLURM_PROCID"], "-")
				r.taskOrder, _ = strconv.Atoi(r.global)
			}
		case batch:
			r.step = "batch"
			if p.pid == script {
				r.local, r.global, r.taskOrder = "0", "0", 0
			}
		default:
			r.step = "extern"
		}
		r.stepKey = stepKey(r.step)
		rows = append(rows, r)
	}
	return rows
}

// listpids is scontrol listpids [JOBID[.STEPID]|*] [NODENAME].
func (c *Cmd) listpids(ctx context.Context, args []string) error {
	if len(args) > 2 {
		return invalid("listpids takes a job (JOBID or JOBID.STEPID, * for every job) and a node name; e.g. scontrol listpids 42.0")
	}
	var job spec.JobID
	step, node := "", ""
	if len(args) > 0 && args[0] != "*" && args[0] != "" {
		id, st, _ := strings.Cut(args[0], ".")
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || n == 0 {
			return invalid("listpids: %q is not a job id; use JOBID or JOBID.STEPID (STEPID a number, batch or extern)", args[0])
		}
		job = spec.JobID(n)
		if st != "" {
			if _, err := strconv.Atoi(st); err != nil && st != "batch" && st != "extern" {
				return invalid("listpids: step %q of %s: a step is a number, batch or extern", st, args[0])
			}
			step = st
		}
	}
	if len(args) > 1 {
		node = args[1]
	}
	ps, err := jobProcs("/proc")
	if err != nil {
		return fmt.Errorf("listpids: %w", err)
	}
	type key struct {
		job     spec.JobID
		attempt int
		node    string
	}
	groups := map[key][]procInfo{}
	hidden := 0
	for _, p := range ps {
		if job != 0 && p.job != job || node != "" && !sameNode(p.node, node) {
			continue
		}
		if !p.envOK {
			hidden++
			continue
		}
		k := key{p.job, p.attempt, p.node}
		groups[k] = append(groups[k], p)
	}
	var rows []pidRow
	var cl *api.Client
	if len(groups) > 0 {
		cl, _ = c.client() // nil: every container is taken for a batch one
	}
	for k, g := range groups {
		// The batch script runs on the job's first node; an srun or
		// salloc allocation has none. Without the controller every
		// container is taken for a batch one.
		batch := true
		if cl != nil {
			j, err := cl.Job(ctx, k.job)
			switch {
			case err == nil:
				if g = ofJob(g, &j, k.attempt); len(g) == 0 {
					continue // another cluster's job of the same number on this host, or an old attempt
				}
				batch = !j.Interactive && (j.Alloc == nil || len(j.Alloc.Nodes) == 0 || sameNode(k.node, j.Alloc.Nodes[0].Node))
			case errors.Is(err, spec.ErrNotFound):
				continue // not this cluster's
			}
		}
		for _, r := range pidRows(g, batch) {
			if step == "" || r.step == step {
				rows = append(rows, r)
			}
		}
	}
	if hidden > 0 {
		fmt.Fprintf(c.Stderr, "scontrol: note: %d processes of other users' jobs are not listed (a process's environment, which names its step, is readable by its owner and root only)\n", hidden)
	}
	if len(rows) == 0 && job != 0 {
		if hidden > 0 {
			return spec.Errorf(spec.ErrPermissionDenied, "job %d's processes on this host are another user's; run scontrol listpids as the job's user or root", job)
		}
		if step != "" {
			return fmt.Errorf("Job step %d.%s does not exist on this node", job, step)
		}
		return fmt.Errorf("Job %d does not exist on this node", job)
	}
	slices.SortFunc(rows, func(a, b pidRow) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.stepKey, b.stepKey), cmp.Compare(a.taskOrder, b.taskOrder), cmp.Compare(a.pid, b.pid))
	})
	fmt.Fprintf(c.Stdout, "%-8s %-8s %-8s %-7s %-8s\n", "PID", "JOBID", "STEPID", "LOCALID", "GLOBALID")
	for _, r := range rows {
		fmt.Fprintf(c.Stdout, "%-8d %-8d %-8s %-7s %-8s\n", r.pid, r.job, r.step, r.local, r.global)
	}
	return nil
}

// ofJob returns those of a container's processes g (attempt) that are
// job j's: none for another attempt; of the rest, each whose
// SLURM_SUBMIT_DIR, where it has one, is the job's. Two clusters on one
// host (tests run several at once) both have a job 1 on a node1, in
// containers of the same name: judging the group by its first process
// dropped the whole group, this job's processes too, whenever the other
// cluster's came first (scontrol listpids said the running job did not
// exist on the node).
func ofJob(g []procInfo, j *spec.Job, attempt int) []procInfo {
	if j.Alloc != nil && j.Alloc.Attempt != 0 && j.Alloc.Attempt != attempt {
		return nil
	}
	return slices.DeleteFunc(g, func(p procInfo) bool {
		d, ok := p.env["SLURM_SUBMIT_DIR"]
		return ok && d != j.SubmitDir
	})
}

// sameNode says whether ctrNode, a container ID's node part, is node's
// (a container started again after a failed create has "-rN" appended).
func sameNode(ctrNode, node string) bool {
	n := containerNode(node)
	rest, ok := strings.CutPrefix(ctrNode, n)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	r, ok := strings.CutPrefix(rest, "-r")
	_, err := strconv.Atoi(r)
	return ok && err == nil
}

// containerNode is a node name as the container ID writes it (the node
// agent's ContainerID: runs of other characters become one '-').
func containerNode(n string) string {
	var b strings.Builder
	sep := false
	for i := 0; i < len(n); i++ {
		ch := n[i]
		switch {
		case ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9':
			b.WriteByte(ch)
			sep = false
		case !sep && b.Len() > 0:
			if ch == '.' || ch == '_' {
				b.WriteByte(ch)
			} else {
				b.WriteByte('-')
			}
			sep = true
		}
	}
	return strings.TrimRight(b.String(), "._-")
}
