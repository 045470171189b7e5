package spec

import (
	"encoding/json"
	"strconv"
)

// AppendJSON appends j's JSON encoding to b, byte for byte what
// json.Marshal(j) writes (TestJobAppendJSONMatchesMarshal fills every
// field, a new one included, and compares). Hand-written because the
// controller encodes a job at each of its state rows (store.Encode) and
// in every assignments answer to its node, and encoding/json's reflection
// over Job's ~90 fields was the larger part of both. Fields that are
// nearly always empty (container, steps, notices, ...) go through
// json.Marshal when set.
func (j *Job) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, uint64(j.ID), 10)
	s := &j.JobSpec
	b = append(b, `,"name":`...)
	b = AppendJSONString(b, s.Name)
	b = append(b, `,"partition":`...)
	b = AppendJSONString(b, s.Partition)
	b = append(b, `,"qos":`...)
	b = AppendJSONString(b, s.QOS)
	b = append(b, `,"account":`...)
	b = AppendJSONString(b, s.Account)
	b = append(b, `,"resources":`...)
	b = s.Resources.appendJSON(b)
	b = append(b, `,"time_limit":`...)
	b = s.TimeLimit.AppendJSON(b)
	b = appendBoolField(b, `,"time_unlimited":true`, s.TimeUnlimited)
	b = append(b, `,"script":`...)
	b = AppendJSONString(b, s.Script)
	b = AppendJSONStringsField(b, `,"args":`, s.Args)
	b = AppendJSONStringsField(b, `,"env":`, s.Env)
	b = append(b, `,"work_dir":`...)
	b = AppendJSONString(b, s.WorkDir)
	b = append(b, `,"submit_dir":`...)
	b = AppendJSONString(b, s.SubmitDir)
	b = appendStringField(b, `,"submit_host":`, s.SubmitHost)
	b = appendStringField(b, `,"output":`, s.Output)
	b = appendStringField(b, `,"error":`, s.Error)
	b = appendStringField(b, `,"image":`, s.Image)
	if s.Container != nil {
		b = appendMarshalled(b, `,"container":`, s.Container)
	}
	b = appendBoolField(b, `,"hold":true`, s.Hold)
	b = appendIntField(b, `,"nice":`, int64(s.Nice))
	b = append(b, `,"begin_time":`...)
	b = s.BeginTime.AppendJSON(b)
	if s.Requeue {
		b = append(b, `,"requeue":true`...)
	} else {
		b = append(b, `,"requeue":false`...)
	}
	b = appendBoolField(b, `,"requeue_expedite":true`, s.RequeueExpedite)
	b = appendStringField(b, `,"array":`, s.Array)
	b = appendStringField(b, `,"dependency":`, s.Depend)
	b = appendStringField(b, `,"signal":`, s.Signal)
	b = appendDurationField(b, `,"checkpoint_interval":`, s.Ckpt)
	b = appendStringField(b, `,"checkpoint_mode":`, s.CkptMode)
	b = appendStringField(b, `,"comment":`, s.Comment)
	if s.Tasks != (Tasks{}) {
		b = append(b, `,"tasks":`...)
		b = s.Tasks.appendJSON(b)
	}
	b = appendStringField(b, `,"open_mode":`, s.OpenMode)
	b = appendStringField(b, `,"wckey":`, s.WCKey)
	b = appendBoolField(b, `,"interactive":true`, s.Interactive)
	b = appendStringField(b, `,"reservation":`, s.Reservation)
	b = appendDurationField(b, `,"time_min":`, s.TimeMin)

	b = append(b, `,"user":`...)
	b = AppendJSONString(b, j.User)
	b = append(b, `,"uid":`...)
	b = strconv.AppendUint(b, uint64(j.UID), 10)
	b = append(b, `,"gid":`...)
	b = strconv.AppendUint(b, uint64(j.GID), 10)
	b = append(b, `,"state":`...)
	b = AppendJSONString(b, string(j.State))
	b = append(b, `,"reason":`...)
	b = AppendJSONString(b, j.Reason)
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(j.ExitCode), 10)
	b = appendIntField(b, `,"exit_signal":`, int64(j.Signal))
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, j.Priority, 10)
	b = append(b, `,"submit_time":`...)
	b = j.SubmitTime.AppendJSON(b)
	b = append(b, `,"start_time":`...)
	b = j.StartTime.AppendJSON(b)
	b = append(b, `,"end_time":`...)
	b = j.EndTime.AppendJSON(b)
	b = appendTimeField(b, `,"suspend_time":`, j.SuspendTime)
	b = appendDurationField(b, `,"suspended":`, j.Suspended)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(j.Attempt), 10)
	b = appendIntField(b, `,"hw_requeues":`, int64(j.HWRequeues))
	b = appendBoolField(b, `,"expedited":true`, j.Expedited)
	b = appendUintField(b, `,"array_job_id":`, uint64(j.ArrayJobID))
	b = appendIntField(b, `,"array_task_id":`, int64(j.ArrayTaskID))
	b = appendUintField(b, `,"het_job_id":`, uint64(j.HetJobID))
	b = appendIntField(b, `,"het_offset":`, int64(j.HetOffset))
	b = appendIntField(b, `,"het_size":`, int64(j.HetSize))
	b = append(b, `,"nodes":`...)
	b = appendStrings(b, j.Nodes)
	b = append(b, `,"gpus":`...)
	b = appendStrings(b, j.GPUs)
	if j.Alloc != nil {
		b = append(b, `,"alloc":`...)
		b = j.Alloc.AppendJSON(b)
	}
	b = appendStringField(b, `,"stop_state":`, string(j.StopState))
	b = appendStringField(b, `,"stop_reason":`, j.StopReason)
	b = appendBoolField(b, `,"stop_checkpoint":true`, j.StopCheckpoint)
	b = appendIntField(b, `,"checkpoints":`, int64(j.Checkpoints))
	if j.LastCheckpoint != (CheckpointRef{}) {
		b = appendMarshalled(b, `,"last_checkpoint":`, j.LastCheckpoint)
	}
	b = appendDurationField(b, `,"lost_work":`, j.LostWork)
	b = appendStringField(b, `,"stdout_path":`, j.StdoutPath)
	b = appendStringField(b, `,"stderr_path":`, j.StderrPath)
	b = append(b, `,"expected_start":`...)
	b = j.ExpectedStart.AppendJSON(b)
	b = AppendJSONStringsField(b, `,"partitions":`, j.Partitions)
	b = appendStringField(b, `,"node_reasons":`, j.NodeReasons)
	b = appendStringField(b, `,"signal_alloc":`, j.SignalAlloc)
	b = appendStringField(b, `,"signal_name":`, j.SignalName)
	b = appendIntField(b, `,"signal_seq":`, int64(j.SignalSeq))
	b = appendStringField(b, `,"idle_gpu":`, j.IdleGPU)
	if j.ImagePull != nil {
		b = appendMarshalled(b, `,"image_pull":`, j.ImagePull)
	}
	b = appendStringField(b, `,"idempotency_key":`, j.IdempotencyKey)
	b = appendStringField(b, `,"signal_target":`, j.SignalTarget)
	if len(j.Notices) > 0 {
		b = appendMarshalled(b, `,"notices":`, j.Notices)
	}
	b = appendIntField(b, `,"notice_seq":`, int64(j.NoticeSeq))
	if len(j.Steps) > 0 {
		// A started job has its batch step: common enough to write here.
		b = append(b, `,"steps":[`...)
		for i := range j.Steps {
			if i > 0 {
				b = append(b, ',')
			}
			b = j.Steps[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	if len(j.StepSignals) > 0 {
		b = appendMarshalled(b, `,"step_signals":`, j.StepSignals)
	}
	b = appendIntField(b, `,"step_signal_seq":`, int64(j.StepSignalSeq))
	if j.Interrupted != nil {
		b = appendMarshalled(b, `,"interrupted":`, j.Interrupted)
	}
	return append(b, '}')
}

// AppendJSON appends r as json.Marshal writes it.
func (r *Resources) AppendJSON(b []byte) []byte { return r.appendJSON(b) }

// appendJSON appends r as json.Marshal writes it.
func (r *Resources) appendJSON(b []byte) []byte {
	b = append(b, `{"nodes":`...)
	b = strconv.AppendInt(b, int64(r.Nodes), 10)
	b = appendIntField(b, `,"max_nodes":`, int64(r.MaxNodes))
	b = append(b, `,"cpus_per_node":`...)
	b = strconv.AppendInt(b, int64(r.CPUsPerNode), 10)
	b = append(b, `,"mem_mib_per_node":`...)
	b = strconv.AppendInt(b, r.MemMiB, 10)
	b = appendBoolField(b, `,"mem_whole_node":true`, r.MemWholeNode)
	b = append(b, `,"gpus_per_node":`...)
	b = strconv.AppendInt(b, int64(r.GPUsPerNode), 10)
	b = appendStringField(b, `,"gpu_model":`, r.GPUModel)
	b = appendStringField(b, `,"gpu_profile":`, r.GPUProfile)
	if r.GPUFraction != 0 {
		b = append(b, `,"gpu_fraction":`...)
		b = appendFloat(b, r.GPUFraction)
	}
	b = appendIntField(b, `,"total_gpus":`, int64(r.TotalGPUs))
	b = appendIntField(b, `,"rdma":`, int64(r.RDMA))
	b = appendBoolField(b, `,"exclusive":true`, r.Exclusive)
	b = AppendJSONStringsField(b, `,"nodelist":`, r.NodeList)
	b = AppendJSONStringsField(b, `,"exclude":`, r.Exclude)
	b = appendStringField(b, `,"constraint":`, r.Constraint)
	return append(b, '}')
}

// appendJSON appends t as json.Marshal writes it.
func (t Tasks) appendJSON(b []byte) []byte {
	b = append(b, '{')
	n := len(b)
	b = appendIntField(b, `,"ntasks":`, int64(t.NTasks))
	b = appendIntField(b, `,"ntasks_per_node":`, int64(t.NTasksPerNode))
	b = appendIntField(b, `,"cpus_per_task":`, int64(t.CPUsPerTask))
	b = appendIntField(b, `,"gpus_per_task":`, int64(t.GPUsPerTask))
	if len(b) > n {
		// The first field written has no comma before it.
		b = append(b[:n], b[n+1:]...)
	}
	return append(b, '}')
}

// AppendJSON appends a's JSON encoding to b, byte for byte what
// json.Marshal(a) writes.
func (a *Alloc) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = AppendJSONString(b, a.ID)
	b = append(b, `,"job_id":`...)
	b = strconv.AppendUint(b, uint64(a.JobID), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(a.Attempt), 10)
	b = append(b, `,"nodes":`...)
	if a.Nodes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range a.Nodes {
			if i > 0 {
				b = append(b, ',')
			}
			b = a.Nodes[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	b = append(b, `,"start_time":`...)
	b = a.StartTime.AppendJSON(b)
	return append(b, '}')
}

// appendJSON appends n as json.Marshal writes it.
func (n *NodeAlloc) appendJSON(b []byte) []byte {
	b = append(b, `{"node":`...)
	b = AppendJSONString(b, n.Node)
	b = append(b, `,"rank":`...)
	b = strconv.AppendInt(b, int64(n.Rank), 10)
	b = appendStringField(b, `,"addr":`, n.Addr)
	b = appendIntField(b, `,"step_port":`, int64(n.StepPort))
	b = append(b, `,"cpus":`...)
	b = strconv.AppendInt(b, int64(n.CPUs), 10)
	b = append(b, `,"mem_mib":`...)
	b = strconv.AppendInt(b, n.MemMiB, 10)
	b = AppendJSONStringsField(b, `,"gpus":`, n.GPUs)
	if n.GPUFraction != 0 {
		b = append(b, `,"gpu_fraction":`...)
		b = appendFloat(b, n.GPUFraction)
	}
	if len(n.MIG) > 0 {
		b = appendMarshalled(b, `,"mig":`, n.MIG)
	}
	b = AppendJSONStringsField(b, `,"nics":`, n.NICs)
	b = appendBoolField(b, `,"ended":true`, n.Ended)
	b = appendIntField(b, `,"pull_ms":`, n.PullMS)
	b = appendIntField(b, `,"pull_bytes":`, n.PullBytes)
	return append(b, '}')
}

// appendJSON appends st as json.Marshal writes it.
func (st *Step) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = AppendJSONString(b, st.ID)
	b = append(b, `,"name":`...)
	b = AppendJSONString(b, st.Name)
	b = append(b, `,"state":`...)
	b = AppendJSONString(b, string(st.State))
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(st.ExitCode), 10)
	b = appendIntField(b, `,"exit_signal":`, int64(st.Signal))
	b = append(b, `,"start_time":`...)
	b = st.StartTime.AppendJSON(b)
	b = append(b, `,"end_time":`...)
	b = st.EndTime.AppendJSON(b)
	b = append(b, `,"nodes":`...)
	b = appendStrings(b, st.Nodes)
	b = append(b, `,"ntasks":`...)
	b = strconv.AppendInt(b, int64(st.NTasks), 10)
	b = appendIntField(b, `,"cpus":`, int64(st.CPUs))
	b = appendIntField(b, `,"gpus":`, int64(st.GPUs))
	b = appendStringField(b, `,"reason":`, st.Reason)
	return append(b, '}')
}

// appendStrings appends ss as a JSON array, null when nil (a field
// without omitempty).
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendJSONString(b, s)
	}
	return append(b, ']')
}

func appendBoolField(b []byte, keyTrue string, v bool) []byte {
	if !v {
		return b
	}
	return append(b, keyTrue...)
}

func appendIntField(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

func appendUintField(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendUint(append(b, key...), v, 10)
}

func appendDurationField(b []byte, key string, d Duration) []byte {
	if d == 0 {
		return b
	}
	return d.AppendJSON(append(b, key...))
}

// appendMarshalled appends key and v through encoding/json: for the
// fields that are nearly always empty.
func appendMarshalled(b []byte, key string, v any) []byte {
	enc, err := json.Marshal(v)
	if err != nil {
		// Only a NaN or infinite float fails, which Validate refuses;
		// null keeps the document well formed.
		enc = []byte("null")
	}
	return append(append(b, key...), enc...)
}
