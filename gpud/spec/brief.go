package spec

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// AppendBriefJSON appends j's brief listing form to b: a JSON object with
// Job's own keys, holding only what a queue listing shows (gpuq's table
// columns and every field of the gpuq --json contract) and omitting zero
// values. Decoded into a Job by any JSON decoder it yields j with the
// other fields zero. Hand-written because the controller keeps one per
// job and listing 100,000 jobs should cost bytes, not reflection.
func (j *Job) AppendBriefJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, uint64(j.ID), 10)
	b = appendStringField(b, `,"name":`, j.Name)
	b = appendStringField(b, `,"user":`, j.User)
	b = appendStringField(b, `,"account":`, j.Account)
	b = appendStringField(b, `,"partition":`, j.Partition)
	b = AppendJSONStringsField(b, `,"partitions":`, j.Partitions)
	b = appendStringField(b, `,"qos":`, j.QOS)
	b = appendStringField(b, `,"state":`, string(j.State))
	b = appendStringField(b, `,"reason":`, j.Reason)
	// %r: why no node runs a pending job, per reason.
	b = appendStringField(b, `,"node_reasons":`, j.NodeReasons)
	b = appendStringField(b, `,"idle_gpu":`, j.IdleGPU)
	if p := j.ImagePull; p != nil {
		// %r: the pull under way, with its image.
		b = appendStringField(b, `,"image":`, j.Image)
		b = append(b, `,"image_pull":{"node":`...)
		b = AppendJSONString(b, p.Node)
		b = append(b, `,"done":`...)
		b = strconv.AppendInt(b, p.Done, 10)
		b = append(b, `,"total":`...)
		b = strconv.AppendInt(b, p.Total, 10)
		if p.Prefetch {
			b = append(b, `,"prefetch":true`...)
		}
		b = append(b, '}')
	}
	if j.ExitCode != 0 {
		b = append(b, `,"exit_code":`...)
		b = strconv.AppendInt(b, int64(j.ExitCode), 10)
	}
	if j.ArrayJobID != 0 {
		// %i shows array tasks as ARRAYID_TASK.
		b = append(b, `,"array_job_id":`...)
		b = strconv.AppendUint(b, uint64(j.ArrayJobID), 10)
		b = append(b, `,"array_task_id":`...)
		b = strconv.AppendInt(b, int64(j.ArrayTaskID), 10)
	}
	if j.HetJobID != 0 {
		// %i shows a heterogeneous job's components as LEADER+OFFSET.
		b = append(b, `,"het_job_id":`...)
		b = strconv.AppendUint(b, uint64(j.HetJobID), 10)
		b = append(b, `,"het_offset":`...)
		b = strconv.AppendInt(b, int64(j.HetOffset), 10)
		b = append(b, `,"het_size":`...)
		b = strconv.AppendInt(b, int64(j.HetSize), 10)
	}
	if j.Priority != 0 {
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, j.Priority, 10)
	}
	if j.TimeLimit != 0 {
		b = append(b, `,"time_limit":`...)
		b = j.TimeLimit.AppendJSON(b)
	}
	b = appendTimeField(b, `,"submit_time":`, j.SubmitTime)
	b = appendTimeField(b, `,"start_time":`, j.StartTime)
	b = appendTimeField(b, `,"end_time":`, j.EndTime)
	b = appendTimeField(b, `,"expected_start":`, j.ExpectedStart)
	b = AppendJSONStringsField(b, `,"nodes":`, j.Nodes)
	b = AppendJSONStringsField(b, `,"gpus":`, j.GPUs)
	// The table's node count and GPU ask (%D, %b).
	if r := &j.Resources; r.Nodes != 0 || r.GPUsPerNode != 0 || r.GPUModel != "" || r.GPUProfile != "" || r.GPUFraction != 0 || r.TotalGPUs != 0 {
		b = append(b, `,"resources":{"nodes":`...)
		b = strconv.AppendInt(b, int64(r.Nodes), 10)
		if r.GPUsPerNode != 0 {
			b = append(b, `,"gpus_per_node":`...)
			b = strconv.AppendInt(b, int64(r.GPUsPerNode), 10)
		}
		b = appendStringField(b, `,"gpu_model":`, r.GPUModel)
		b = appendStringField(b, `,"gpu_profile":`, r.GPUProfile)
		if r.GPUFraction != 0 {
			b = append(b, `,"gpu_fraction":`...)
			b = appendFloat(b, r.GPUFraction)
		}
		if r.TotalGPUs != 0 {
			b = append(b, `,"total_gpus":`...)
			b = strconv.AppendInt(b, int64(r.TotalGPUs), 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendJSONString(append(b, key...), s)
}

func appendTimeField(b []byte, key string, t Time) []byte {
	if t.IsZero() {
		return b
	}
	return t.AppendJSON(append(b, key...))
}

// AppendJSONStringsField appends key (`,"name":`) and ss as a JSON array
// of strings, nothing when ss is empty (an omitempty field).
func AppendJSONStringsField(b []byte, key string, ss []string) []byte {
	if len(ss) == 0 {
		return b
	}
	return appendStrings(append(b, key...), ss)
}

// appendFloat encodes f as encoding/json does (the few values a GPU
// fraction takes never need its exponent form, but stay exact anyway).
func appendFloat(b []byte, f float64) []byte {
	enc, err := json.Marshal(f)
	if err != nil {
		return append(b, '0') // NaN or Inf: Validate rejects them
	}
	return append(b, enc...)
}

// AppendJSONString appends s as a JSON string, byte for byte as
// encoding/json writes it: plain printable ASCII is copied, anything that
// needs escaping goes through json.Marshal.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
