package slurmrest

import (
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// jobRec is a job being written, with what its fields need besides it.
type jobRec struct {
	*spec.Job
	cluster string
}

// The pending reasons of a held job.
func held(j *spec.Job) bool {
	return j.State == spec.StatePending && (j.Reason == spec.ReasonHeld || j.Reason == spec.ReasonHeldAdmin)
}

// timeLimitMin writes a job's time limit in minutes; none is infinite.
func timeLimit(w *jw, d spec.Duration, unlimited bool) {
	if d <= 0 || unlimited && d <= 0 {
		w.infinite()
		return
	}
	w.num(int64((d.Std() + time.Minute - 1) / time.Minute))
}

// gresPerNode is a job's GPU request per node as a TRES string
// ("gres/gpu:h100:2"), "" for none.
func gresPerNode(r *spec.Resources) string {
	switch {
	case r.GPUFraction > 0:
		s := "gres/gpu:"
		if r.GPUModel != "" {
			s += r.GPUModel + ":"
		}
		return s + strconv.FormatFloat(r.GPUFraction, 'g', -1, 64)
	case r.GPUsPerNode <= 0:
		return ""
	case r.GPUProfile != "":
		return "gres/gpu:" + r.GPUProfile + ":" + strconv.Itoa(r.GPUsPerNode)
	case r.GPUModel != "":
		return "gres/gpu:" + r.GPUModel + ":" + strconv.Itoa(r.GPUsPerNode)
	}
	return "gres/gpu:" + strconv.Itoa(r.GPUsPerNode)
}

// nodeCount is the nodes a job asks for or holds.
func nodeCount(j *spec.Job) int {
	if len(j.Nodes) > 0 && j.State != spec.StatePending {
		return len(j.Nodes)
	}
	return max(j.Resources.Nodes, 1)
}

// tresOf is a job's TRES as Slurm writes tres_req_str: cpu, mem, node,
// billing and gres/gpu (whole GPUs or slices).
func tresOf(j *spec.Job) string {
	r := &j.Resources
	n := nodeCount(j)
	cpus := r.CPUsPerNode * n
	var b strings.Builder
	b.WriteString("cpu=" + strconv.Itoa(cpus))
	if r.MemMiB > 0 {
		b.WriteString(",mem=" + memString(r.MemMiB*int64(n)))
	}
	b.WriteString(",node=" + strconv.Itoa(n))
	b.WriteString(",billing=" + strconv.Itoa(cpus))
	if r.GPUsPerNode > 0 {
		b.WriteString(",gres/gpu=" + strconv.Itoa(r.GPUsPerNode*n))
	}
	return b.String()
}

// memString writes MiB as Slurm's TRES strings do (4G, 512M).
func memString(mib int64) string {
	switch {
	case mib%(1<<20) == 0:
		return strconv.FormatInt(mib>>20, 10) + "T"
	case mib%1024 == 0:
		return strconv.FormatInt(mib>>10, 10) + "G"
	}
	return strconv.FormatInt(mib, 10) + "M"
}

// exitCode writes process_exit_code_verbose.
func exitCode(w *jw, state spec.JobState, code, sig int) {
	w.obj(func() {
		w.key("status")
		w.arr(func() {
			switch {
			case state == spec.StatePending || state == spec.StateRunning || state == "":
				w.str("PENDING")
			case sig != 0:
				w.str("SIGNALED")
			case code != 0:
				w.str("ERROR")
			default:
				w.str("SUCCESS")
			}
		})
		w.key("return_code")
		w.numIf(state.Terminal() || state == spec.StateCompleting, int64(code))
		w.key("signal")
		w.obj(func() {
			w.key("id")
			w.numIf(sig != 0, int64(sig))
			w.key("name")
			w.str(sigName(sig))
		})
	})
}

var sigNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
	10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 18: "SIGCONT", 19: "SIGSTOP"}

func sigName(n int) string {
	if n == 0 {
		return ""
	}
	if s, ok := sigNames[n]; ok {
		return s
	}
	return "SIG" + strconv.Itoa(n)
}

// stateReason is Slurm's state_reason: why a pending job waits, "None"
// otherwise.
func stateReason(j *spec.Job) string {
	if j.State == spec.StatePending && j.Reason != "" {
		return j.Reason
	}
	return spec.ReasonNone
}

func hostlistOf(nodes []string) string { return hostlist.Compress(nodes) }

func tm(t spec.Time) time.Time { return t.Time }

// jobFields is job_info (GET jobs, job/{id}), newest members last within
// Slurm's own order.
var jobFields = newTable([]field[jobRec]{
	f("account", str(func(j *jobRec) string { return j.Account })),
	f("accrue_time", func(w *jw, j *jobRec) { w.when(tm(j.SubmitTime)) }),
	f("admin_comment", constStr[jobRec]("")),
	f("allocating_node", constStr[jobRec]("")),
	f("array_job_id", func(w *jw, j *jobRec) { w.numIf(j.ArrayJobID != 0, int64(j.ArrayJobID)) }),
	f("array_task_id", func(w *jw, j *jobRec) { w.numIf(j.ArrayJobID != 0, int64(j.ArrayTaskID)) }),
	f("array_max_tasks", func(w *jw, j *jobRec) { w.numIf(j.ArrayJobID != 0, 0) }),
	f("array_task_string", constStr[jobRec]("")),
	f("association_id", constInt[jobRec](0)),
	f("batch_features", constStr[jobRec]("")),
	f("batch_flag", func(w *jw, j *jobRec) { w.bool(!j.Interactive) }),
	f("batch_host", func(w *jw, j *jobRec) {
		if len(j.Nodes) > 0 && j.State.Active() {
			w.str(j.Nodes[0])
			return
		}
		w.str("")
	}),
	f("flags", func(w *jw, j *jobRec) { w.arr(func() {}) }),
	f("burst_buffer", constStr[jobRec]("")),
	f("burst_buffer_state", constStr[jobRec]("")),
	f("cluster", str(func(j *jobRec) string { return j.cluster })),
	f("cluster_features", constStr[jobRec]("")),
	f("command", func(w *jw, j *jobRec) { w.str(strings.Join(append([]string{j.Name}, j.Args...), " ")) }),
	f("comment", str(func(j *jobRec) string { return j.Comment })),
	f("container", func(w *jw, j *jobRec) { w.str(j.Image) }),
	f("container_id", constStr[jobRec]("")),
	since(45, "container_type", constStr[jobRec]("")),
	f("contiguous", constBool[jobRec](false)),
	f("core_spec", constInt[jobRec](0)),
	f("thread_spec", constInt[jobRec](0)),
	f("cores_per_socket", unsetNum[jobRec]()),
	f("billable_tres", func(w *jw, j *jobRec) { w.fnum(float64(j.Resources.CPUsPerNode * nodeCount(j.Job))) }),
	f("cpus_per_task", func(w *jw, j *jobRec) { w.num(int64(max(j.Tasks.CPUsPerTask, 1))) }),
	f("cpu_frequency_minimum", unsetNum[jobRec]()),
	f("cpu_frequency_maximum", unsetNum[jobRec]()),
	f("cpu_frequency_governor", unsetNum[jobRec]()),
	f("cpus_per_tres", constStr[jobRec]("")),
	f("cron", constStr[jobRec]("")),
	f("deadline", unsetNum[jobRec]()),
	f("delay_boot", unsetNum[jobRec]()),
	f("dependency", str(func(j *jobRec) string { return j.Depend })),
	f("derived_exit_code", func(w *jw, j *jobRec) { exitCode(w, j.State, j.ExitCode, j.Signal) }),
	f("eligible_time", func(w *jw, j *jobRec) {
		if !j.BeginTime.IsZero() && j.BeginTime.After(j.SubmitTime.Time) {
			w.when(tm(j.BeginTime))
			return
		}
		w.when(tm(j.SubmitTime))
	}),
	f("end_time", func(w *jw, j *jobRec) { w.when(tm(j.EndTime)) }),
	f("excluded_nodes", func(w *jw, j *jobRec) { w.str(hostlistOf(j.Resources.Exclude)) }),
	f("exit_code", func(w *jw, j *jobRec) { exitCode(w, j.State, j.ExitCode, j.Signal) }),
	f("extra", constStr[jobRec]("")),
	f("failed_node", constStr[jobRec]("")),
	f("features", func(w *jw, j *jobRec) { w.str(j.Resources.Constraint) }),
	f("federation_origin", constStr[jobRec]("")),
	f("federation_siblings_active", constStr[jobRec]("")),
	f("federation_siblings_viable", constStr[jobRec]("")),
	f("gres_detail", func(w *jw, j *jobRec) {
		w.arr(func() {
			if j.Alloc == nil || !j.State.Active() {
				return
			}
			for _, n := range j.Alloc.Nodes {
				g := len(n.GPUs) + len(n.MIG)
				if g == 0 {
					w.str("")
					continue
				}
				w.str("gpu:" + strconv.Itoa(g))
			}
		})
	}),
	f("group_id", func(w *jw, j *jobRec) { w.int(int64(j.GID)) }),
	f("group_name", func(w *jw, j *jobRec) { w.str(strconv.FormatUint(uint64(j.GID), 10)) }),
	f("het_job_id", unsetNum[jobRec]()),
	f("het_job_id_set", constStr[jobRec]("")),
	f("het_job_offset", unsetNum[jobRec]()),
	f("job_id", func(w *jw, j *jobRec) { w.uint(uint64(j.ID)) }),
	f("job_resources", func(w *jw, j *jobRec) { jobResources(w, j.Job) }),
	f("job_size_str", func(w *jw, j *jobRec) { w.strs(nil) }),
	f("job_state", func(w *jw, j *jobRec) { w.strs(jobStates(j.Job)) }),
	f("last_sched_evaluation", unsetNum[jobRec]()),
	f("licenses", constStr[jobRec]("")),
	since(43, "licenses_allocated", constStr[jobRec]("")),
	f("mail_type", emptyList[jobRec]()),
	f("mail_user", constStr[jobRec]("")),
	f("max_cpus", unsetNum[jobRec]()),
	f("max_nodes", func(w *jw, j *jobRec) { w.num(int64(max(j.Resources.Nodes, 1))) }),
	f("mcs_label", constStr[jobRec]("")),
	f("memory_per_tres", constStr[jobRec]("")),
	since(45, "memory_update_delay", constInt[jobRec](0)),
	since(45, "memory_update_margin", constInt[jobRec](0)),
	f("name", str(func(j *jobRec) string { return j.Name })),
	f("network", constStr[jobRec]("")),
	f("nodes", func(w *jw, j *jobRec) {
		if len(j.Nodes) > 0 && j.State != spec.StatePending {
			w.str(hostlistOf(j.Nodes))
			return
		}
		w.str("")
	}),
	f("nice", func(w *jw, j *jobRec) { w.int(int64(j.Nice)) }),
	f("tasks_per_core", unsetNum[jobRec]()),
	f("tasks_per_tres", unsetNum[jobRec]()),
	f("tasks_per_node", func(w *jw, j *jobRec) { w.numIf(j.Tasks.NTasksPerNode > 0, int64(j.Tasks.NTasksPerNode)) }),
	f("tasks_per_socket", unsetNum[jobRec]()),
	f("tasks_per_board", unsetNum[jobRec]()),
	f("cpus", func(w *jw, j *jobRec) { w.num(int64(j.Resources.CPUsPerNode * nodeCount(j.Job))) }),
	f("node_count", func(w *jw, j *jobRec) { w.num(int64(nodeCount(j.Job))) }),
	f("tasks", func(w *jw, j *jobRec) { w.num(int64(max(j.Tasks.NTasks, 1))) }),
	f("partition", str(func(j *jobRec) string { return j.Partition })),
	f("prefer", constStr[jobRec]("")),
	f("memory_per_cpu", unsetNum[jobRec]()),
	f("memory_per_node", func(w *jw, j *jobRec) { w.numIf(j.Resources.MemMiB > 0, j.Resources.MemMiB) }),
	f("minimum_cpus_per_node", func(w *jw, j *jobRec) { w.num(int64(j.Resources.CPUsPerNode)) }),
	f("minimum_tmp_disk_per_node", func(w *jw, j *jobRec) { w.num(0) }),
	until(44, "power", func(w *jw, j *jobRec) { w.obj(func() { w.key("flags"); w.arr(func() {}) }) }),
	f("preempt_time", unsetNum[jobRec]()),
	f("preemptable_time", unsetNum[jobRec]()),
	f("pre_sus_time", func(w *jw, j *jobRec) { w.num(0) }),
	f("hold", func(w *jw, j *jobRec) { w.bool(held(j.Job)) }),
	f("priority", func(w *jw, j *jobRec) { w.num(j.Priority) }),
	f("priority_by_partition", emptyList[jobRec]()),
	f("profile", emptyList[jobRec]()),
	f("qos", str(func(j *jobRec) string { return j.QOS })),
	f("reboot", constBool[jobRec](false)),
	f("required_nodes", func(w *jw, j *jobRec) { w.str(hostlistOf(j.Resources.NodeList)) }),
	f("required_switches", constInt[jobRec](0)),
	f("requeue", func(w *jw, j *jobRec) { w.bool(j.Requeue) }),
	f("resize_time", unsetNum[jobRec]()),
	f("restart_cnt", func(w *jw, j *jobRec) { w.int(int64(max(j.Attempt-1, 0))) }),
	f("resv_name", constStr[jobRec]("")),
	f("scheduled_nodes", constStr[jobRec]("")),
	since(43, "segment_size", constInt[jobRec](0)),
	f("selinux_context", constStr[jobRec]("")),
	f("shared", func(w *jw, j *jobRec) {
		w.arr(func() {
			if j.Resources.Exclusive {
				w.str("none")
			}
		})
	}),
	f("sockets_per_board", constInt[jobRec](0)),
	f("sockets_per_node", unsetNum[jobRec]()),
	f("start_time", func(w *jw, j *jobRec) {
		if j.State == spec.StatePending && !j.ExpectedStart.IsZero() {
			w.when(tm(j.ExpectedStart))
			return
		}
		w.when(tm(j.StartTime))
	}),
	f("state_description", func(w *jw, j *jobRec) {
		if j.State == spec.StatePending {
			w.str(j.NodeReasons)
			return
		}
		w.str(j.Reason)
	}),
	f("state_reason", func(w *jw, j *jobRec) { w.str(stateReason(j.Job)) }),
	f("standard_input", constStr[jobRec]("/dev/null")),
	f("standard_output", func(w *jw, j *jobRec) { w.str(firstNonEmpty(j.StdoutPath, j.Output)) }),
	f("standard_error", func(w *jw, j *jobRec) { w.str(firstNonEmpty(j.StderrPath, j.Error, j.StdoutPath, j.Output)) }),
	since(43, "stdin_expanded", constStr[jobRec]("/dev/null")),
	since(43, "stdout_expanded", func(w *jw, j *jobRec) { w.str(j.StdoutPath) }),
	since(43, "stderr_expanded", func(w *jw, j *jobRec) { w.str(firstNonEmpty(j.StderrPath, j.StdoutPath)) }),
	since(44, "step_id", func(w *jw, j *jobRec) {
		w.obj(func() {
			w.key("sluid")
			w.str("")
			w.key("job_id")
			w.num(int64(j.ID))
			w.key("step_het_component")
			w.unset()
			w.key("step_id")
			w.str("")
		})
	}),
	f("submit_time", func(w *jw, j *jobRec) { w.when(tm(j.SubmitTime)) }),
	since(44, "submit_line", constStr[jobRec]("")),
	f("suspend_time", func(w *jw, j *jobRec) { w.num(0) }),
	f("system_comment", constStr[jobRec]("")),
	f("time_limit", func(w *jw, j *jobRec) { timeLimit(w, j.TimeLimit, j.TimeUnlimited) }),
	f("time_minimum", func(w *jw, j *jobRec) { w.num(int64((j.TimeMin.Std() + time.Minute - 1) / time.Minute)) }),
	f("threads_per_core", unsetNum[jobRec]()),
	f("tres_bind", constStr[jobRec]("")),
	f("tres_freq", constStr[jobRec]("")),
	f("tres_per_job", func(w *jw, j *jobRec) {
		if j.Resources.TotalGPUs > 0 {
			w.str("gres/gpu:" + strconv.Itoa(j.Resources.TotalGPUs))
			return
		}
		w.str("")
	}),
	f("tres_per_node", func(w *jw, j *jobRec) { w.str(gresPerNode(&j.Resources)) }),
	f("tres_per_socket", constStr[jobRec]("")),
	f("tres_per_task", func(w *jw, j *jobRec) {
		if j.Tasks.GPUsPerTask > 0 {
			w.str("gres/gpu:" + strconv.Itoa(j.Tasks.GPUsPerTask))
			return
		}
		w.str("")
	}),
	f("tres_req_str", func(w *jw, j *jobRec) { w.str(tresOf(j.Job)) }),
	f("tres_alloc_str", func(w *jw, j *jobRec) {
		if j.State == spec.StatePending {
			w.str("")
			return
		}
		w.str(tresOf(j.Job))
	}),
	f("user_id", func(w *jw, j *jobRec) { w.int(int64(j.UID)) }),
	f("user_name", str(func(j *jobRec) string { return j.User })),
	f("maximum_switch_wait_time", constInt[jobRec](0)),
	f("wckey", str(func(j *jobRec) string { return j.WCKey })),
	f("current_working_directory", str(func(j *jobRec) string { return j.WorkDir })),
})

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// jobStates is Slurm's job_state list: the base state, then flags.
func jobStates(j *spec.Job) []string {
	st := []string{string(j.State)}
	if j.State == "" {
		st[0] = string(spec.StatePending)
	}
	if j.StopState == spec.StateRequeued && j.State.Active() {
		st = append(st, "REQUEUED")
	}
	return st
}

// jobResources writes job_res: where a running job's resources are.
func jobResources(w *jw, j *spec.Job) {
	w.obj(func() {
		var nodes []spec.NodeAlloc
		if j.Alloc != nil && (j.State.Active() || j.State.Terminal()) {
			nodes = j.Alloc.Nodes
		}
		cpus := 0
		names := make([]string, 0, len(nodes))
		for _, n := range nodes {
			cpus += n.CPUs
			names = append(names, n.Node)
		}
		w.key("select_type")
		w.arr(func() {})
		w.key("nodes")
		w.obj(func() {
			w.key("count")
			w.int(int64(len(nodes)))
			w.key("select_type")
			w.arr(func() { w.str("AVAILABLE") })
			w.key("list")
			w.str(hostlistOf(names))
			w.key("whole")
			w.bool(j.Resources.Exclusive)
			w.key("allocation")
			w.arr(func() {
				for i, n := range nodes {
					w.obj(func() {
						w.key("index")
						w.int(int64(i))
						w.key("name")
						w.str(n.Node)
						w.key("cpus")
						w.obj(func() {
							w.key("count")
							w.int(int64(n.CPUs))
							w.key("used")
							w.int(int64(n.CPUs))
						})
						w.key("memory")
						w.obj(func() {
							w.key("used")
							w.int(n.MemMiB)
							w.key("allocated")
							w.int(n.MemMiB)
						})
						// gpud allocates CPU counts, not named cores: no
						// socket or core is claimed.
						w.key("sockets")
						w.arr(func() {})
					})
				}
			})
		})
		w.key("cpus")
		w.int(int64(cpus))
		w.key("threads_per_core")
		w.num(1)
	})
}
