package slurm

import (
	"bytes"
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

// writeJobShow writes one job as Slurm 22.05's scontrol show job lays it
// out: Slurm's keys in Slurm's order and groups, each group on its own
// line, continuation lines indented three spaces. detail is the number of
// -d: 1 adds DerivedExitCode and the per-node allocation (JOB_GRES and a
// Nodes= line per node), 2 also the batch script. Keys gpud has and Slurm
// lacks (checkpoints, image, idle-GPU state, why no node runs a pending
// job) follow Slurm's last key, Power=, so a parser that stops there, or
// reads key=value words, reads Slurm's fields.
func writeJobShow(b *bytes.Buffer, j *spec.Job, now time.Time, detail int) {
	r := &j.Resources
	null := orNull
	id := strconv.FormatUint(uint64(j.ID), 10)
	head := []string{"JobId=" + id}
	if j.ArrayJobID != 0 {
		head = append(head, "ArrayJobId="+strconv.FormatUint(uint64(j.ArrayJobID), 10), "ArrayTaskId="+strconv.Itoa(j.ArrayTaskID))
	}
	if j.HetJobID != 0 {
		// Slurm's: the leader, the component, and the ids of them all.
		set := strconv.FormatUint(uint64(j.HetJobID), 10)
		if j.HetSize > 1 {
			set += "-" + strconv.FormatUint(uint64(j.HetJobID)+uint64(j.HetSize)-1, 10)
		}
		head = append(head, "HetJobId="+strconv.FormatUint(uint64(j.HetJobID), 10), "HetJobOffset="+strconv.Itoa(j.HetOffset), "HetJobIdSet="+set)
	}
	head = append(head, "JobName="+null(j.Name))
	reason := j.Reason
	if reason == "" {
		reason = spec.ReasonNone
	}
	qos := []string{"Priority=" + strconv.FormatInt(j.Priority, 10), "Nice=" + strconv.Itoa(j.Nice), "Account=" + null(j.Account), "QOS=" + null(j.QOS)}
	if j.WCKey != "" {
		qos = append(qos, "WCKey=*"+j.WCKey)
	}
	exit := "ExitCode=" + jobExitCode(j)
	limit := "UNLIMITED"
	if j.TimeLimit != 0 {
		limit = format.AcctDuration(int64(j.TimeLimit.Std() / time.Second))
	}
	tm := func(t spec.Time) string {
		if t.IsZero() {
			return "Unknown"
		}
		return t.Local().Format(format.TimeLayout)
	}
	start, end := j.StartTime, j.EndTime
	if j.State == spec.StatePending {
		start = j.ExpectedStart
	}
	if end.IsZero() && !start.IsZero() && j.TimeLimit != 0 && !j.State.Terminal() {
		end = spec.NewTime(start.Add(j.TimeLimit.Std()))
	}
	eligible := j.BeginTime
	if eligible.IsZero() {
		eligible = j.SubmitTime
	}
	nodes := hostlist.Compress(j.Nodes)
	cpus, mem := jobCPUsMem(j)
	tasks := max(j.Tasks.NTasks, j.Tasks.NTasksPerNode*max(r.Nodes, 1), 1)
	perTask := max(j.Tasks.CPUsPerTask, 1)
	lines := [][]string{
		head,
		{fmt.Sprintf("UserId=%s(%d)", null(j.User), j.UID), fmt.Sprintf("GroupId=%s(%d)", groupName(j.GID), j.GID), "MCS_label=N/A"},
		qos,
		{"JobState=" + string(j.State), "Reason=" + reason, "Dependency=" + null(j.Depend)},
		{"Requeue=" + boolNum(j.Requeue), "Restarts=" + strconv.Itoa(max(j.Attempt-1-j.HWRequeues, 0)), "BatchFlag=1", "Reboot=0", exit},
	}
	if detail > 0 {
		lines = append(lines, []string{"DerivedExitCode=" + jobExitCode(j)})
	}
	lines = append(lines,
		[]string{"RunTime=" + format.AcctDuration(int64(format.Used(j, now)/time.Second)), "TimeLimit=" + limit, "TimeMin=" + timeMin(j)},
		[]string{"SubmitTime=" + tm(j.SubmitTime), "EligibleTime=" + tm(eligible)},
		[]string{"AccrueTime=" + tm(eligible)},
		[]string{"StartTime=" + tm(start), "EndTime=" + tm(end), "Deadline=N/A"},
		[]string{"SuspendTime=" + suspendTime(j), "SecsPreSuspend=" + secsPreSuspend(j, now), "LastSchedEval=" + tm(j.SubmitTime), "Scheduler=Main"},
		[]string{"Partition=" + null(format.JobPartition(j)), "AllocNode:Sid=" + null("") + ":0"},
		[]string{"ReqNodeList=" + null(strings.Join(r.NodeList, ",")), "ExcNodeList=" + null(strings.Join(r.Exclude, ","))},
		[]string{"NodeList=" + null(nodes)},
	)
	if len(j.Nodes) > 0 {
		lines = append(lines, []string{"BatchHost=" + j.Nodes[0]})
	}
	numNodes := strconv.Itoa(max(r.Nodes, 1))
	if len(j.Nodes) > 0 {
		numNodes = strconv.Itoa(len(j.Nodes))
	}
	lines = append(lines,
		[]string{"NumNodes=" + numNodes, "NumCPUs=" + strconv.Itoa(cpus), "NumTasks=" + strconv.Itoa(tasks), "CPUs/Task=" + strconv.Itoa(perTask), "ReqB:S:C:T=0:0:*:*"},
		[]string{"TRES=" + jobTRES(j, cpus, mem)},
		[]string{"Socks/Node=*", "NtasksPerN:B:S:C=" + strconv.Itoa(j.Tasks.NTasksPerNode) + ":0:*:*", "CoreSpec=*"},
	)
	if detail > 0 && j.Alloc != nil {
		if g := gresOf(r); g != "" {
			lines = append(lines, []string{"JOB_GRES=" + g})
		}
		for _, n := range j.Alloc.Nodes {
			l := []string{"  Nodes=" + n.Node, "CPUs=" + strconv.Itoa(n.CPUs), "Mem=" + strconv.FormatInt(n.MemMiB, 10)}
			if len(n.GPUs) > 0 {
				l = append(l, fmt.Sprintf("GRES=gpu:%d(IDX:%s)", len(n.GPUs), strings.Join(n.GPUs, ",")))
			}
			lines = append(lines, l)
		}
	}
	minMem := "MinMemoryNode=" + format.MiB(r.MemMiB)
	if r.MemWholeNode || r.MemMiB == 0 {
		minMem = "MinMemoryNode=0" // --mem=0: the node's whole memory
	}
	lines = append(lines,
		[]string{"MinCPUsNode=" + strconv.Itoa(max(r.CPUsPerNode, 1)), minMem, "MinTmpDiskNode=0"},
		[]string{"Features=" + null(r.Constraint), "DelayBoot=00:00:00"},
		[]string{"OverSubscribe=" + oversubscribe(r.Exclusive), "Contiguous=0", "Licenses=(null)", "Network=(null)"},
		[]string{"Command=" + null(command(j))},
		[]string{"WorkDir=" + null(j.WorkDir)},
	)
	if j.Comment != "" {
		lines = append(lines, []string{"Comment=" + j.Comment})
	}
	stdout := firstOf(j.StdoutPath, j.Output)
	lines = append(lines,
		[]string{"StdErr=" + null(firstOf(j.StderrPath, j.Error, stdout))},
		[]string{"StdIn=/dev/null"},
		[]string{"StdOut=" + null(stdout)},
	)
	if g := gresOf(r); g != "" {
		lines = append(lines, []string{"TresPerNode=gres:" + g})
	}
	lines = append(lines, []string{"Power="},
		// gpud's own keys, after Slurm's.
		[]string{"SubmitDir=" + null(j.SubmitDir), "Image=" + null(j.Image), "Signal=" + null(j.JobSpec.Signal), "Hold=" + boolNum(j.Hold)},
		[]string{"Attempt=" + strconv.Itoa(j.Attempt), "Checkpoints=" + strconv.Itoa(j.Checkpoints), "IdleGPU=" + null(j.IdleGPU)},
	)
	if f := format.ImageFields(j); len(f) > 0 {
		lines = append(lines, f)
	}
	if j.NodeReasons != "" {
		// Why no node runs the pending job now; the last line, as its
		// value has spaces.
		lines = append(lines, []string{"NodeReasons=" + j.NodeReasons})
	}
	for i, l := range lines {
		if i > 0 {
			b.WriteString("   ")
		}
		b.WriteString(strings.Join(l, " "))
		b.WriteByte('\n')
	}
	if detail > 1 && j.Script != "" {
		// -dd: the batch script, as scontrol prints it.
		b.WriteString("   BatchScript=\n")
		b.WriteString(j.Script)
		if !strings.HasSuffix(j.Script, "\n") {
			b.WriteByte('\n')
		}
	}
}

// jobExitCode is the job's ExitCode as Slurm shows it: code:signal, and
// for a job the kernel's OOM killer ended (OUT_OF_MEMORY) 0:125, Slurm's
// SIG_OOM (253) as its exit status shows it (253 & 0x7f).
func jobExitCode(j *spec.Job) string {
	return format.StateExitCode(j.State, j.ExitCode, j.Signal)
}

// jobCPUsMem are the job's CPUs and memory (MiB) in all: its allocation's
// once it has one, else its request.
func jobCPUsMem(j *spec.Job) (int, int64) {
	if j.Alloc != nil && len(j.Alloc.Nodes) > 0 {
		var cpus int
		var mem int64
		for _, n := range j.Alloc.Nodes {
			cpus += n.CPUs
			mem += n.MemMiB
		}
		return cpus, mem
	}
	n := max(j.Resources.Nodes, 1)
	return max(j.Resources.CPUsPerNode, 1) * n, j.Resources.MemMiB * int64(n)
}

// jobTRES is scontrol's TRES=: cpu, mem, node, billing, then GPUs, in
// Slurm's TRES id order (not sacct's alphabetical one).
func jobTRES(j *spec.Job, cpus int, mem int64) string {
	nodes := max(j.Resources.Nodes, len(j.Nodes), 1)
	s := "cpu=" + strconv.Itoa(cpus)
	if mem > 0 {
		s += ",mem=" + format.MiB(mem)
	}
	s += ",node=" + strconv.Itoa(nodes) + ",billing=" + strconv.Itoa(cpus)
	gpus := j.Resources.GPUsPerNode * nodes
	if j.Alloc != nil && len(j.Alloc.Nodes) > 0 {
		gpus = 0
		for _, n := range j.Alloc.Nodes {
			gpus += len(n.GPUs)
		}
	}
	if gpus > 0 {
		s += ",gres/gpu=" + strconv.Itoa(gpus)
	}
	return s
}

// gresOf is the job's per-node GPU request as Slurm's gres: gpu[:model]:N.
func gresOf(r *spec.Resources) string {
	if r.GPUsPerNode <= 0 {
		return ""
	}
	if r.GPUModel != "" {
		return "gpu:" + r.GPUModel + ":" + strconv.Itoa(r.GPUsPerNode)
	}
	return "gpu:" + strconv.Itoa(r.GPUsPerNode)
}

// command is scontrol's Command=: the script's path when it names one
// (gpud keeps the script's text, not its path), else the job's name.
func command(j *spec.Job) string {
	if len(j.Args) > 0 {
		return j.Name + " " + strings.Join(j.Args, " ")
	}
	return j.Name
}

func oversubscribe(exclusive bool) string {
	if exclusive {
		return "NO"
	}
	return "OK"
}

func boolNum(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// groupName is the name of group gid on this host, or its number.
func groupName(gid uint32) string {
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10))
	if err != nil {
		return strconv.FormatUint(uint64(gid), 10)
	}
	return g.Name
}

// timeMin is --time-min as scontrol shows it (N/A when none).
func timeMin(j *spec.Job) string {
	if j.TimeMin <= 0 {
		return "N/A"
	}
	return format.AcctDuration(int64(j.TimeMin.Std() / time.Second))
}
