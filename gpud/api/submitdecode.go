package api

import (
	"github.com/gpud/gpud/gpud/spec"
)

// DecodeSubmitRequest decodes a submission (POST /v1/jobs) by hand, in
// one pass without reflection: every sbatch, gpusubmit and REST
// submission is one, and in the live burst the controller decodes one
// per job it starts. It takes the form the clients write
// (SubmitRequest.MarshalJSON): exact keys, each once, no null where a
// value is expected, no unknown key. For anything else it returns false
// and leaves *req zero, and the caller decodes the body with
// encoding/json, strictly (DisallowUnknownFields), which accepts or
// refuses it with its own error, as every submission was decoded before.
// Where it returns true, *req is what that strict decoding gives
// (TestDecodeSubmitRequestMatchesEncodingJSON, FuzzDecodeSubmitRequest).
// The body must be valid UTF-8 (the server checks that first).
func DecodeSubmitRequest(data []byte, req *SubmitRequest) bool {
	*req = SubmitRequest{}
	d := jobsDecoder{data: data}
	var seen uint64
	ok := d.object(func(key []byte) bool {
		switch string(key) {
		case "job":
			return once(&seen, 0) && d.jobSpec(&req.Job)
		case "het":
			if !once(&seen, 1) {
				return false
			}
			if d.literal("null") {
				req.Het = nil
				return true
			}
			if !d.consume('[') {
				return false
			}
			req.Het = make([]spec.JobSpec, 0, 2)
			if d.consume(']') {
				return true
			}
			for {
				req.Het = append(req.Het, spec.JobSpec{})
				d.ws()
				if !d.jobSpec(&req.Het[len(req.Het)-1]) {
					return false
				}
				if d.consume(']') {
					return true
				}
				if !d.consume(',') {
					return false
				}
			}
		case "test_only":
			return once(&seen, 2) && d.bool(&req.TestOnly)
		}
		return false
	})
	if d.ws(); !ok || d.pos != len(d.data) {
		*req = SubmitRequest{}
		return false
	}
	return true
}

// once marks key number bit as seen in one object and reports whether it
// was new. encoding/json decodes a repeated key's value over the first
// (an object's fields merge, an array's elements are decoded over the
// earlier ones), so an object that repeats a key is left to it.
func once(seen *uint64, bit uint) bool {
	if *seen&(1<<bit) != 0 {
		return false
	}
	*seen |= 1 << bit
	return true
}

// jobSpec decodes a job's specification into j (zero) by hand; false
// where it leaves the body to encoding/json.
func (d *jobsDecoder) jobSpec(j *spec.JobSpec) bool {
	var seen uint64
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "name":
			return once(&seen, 0) && d.str(&j.Name)
		case "partition":
			return once(&seen, 1) && d.str(&j.Partition)
		case "qos":
			return once(&seen, 2) && d.str(&j.QOS)
		case "account":
			return once(&seen, 3) && d.str(&j.Account)
		case "resources":
			return once(&seen, 4) && d.submitResources(&j.Resources)
		case "time_limit":
			return once(&seen, 5) && d.duration(&j.TimeLimit)
		case "time_unlimited":
			return once(&seen, 6) && d.bool(&j.TimeUnlimited)
		case "script":
			return once(&seen, 7) && d.str(&j.Script)
		case "args":
			return once(&seen, 8) && d.strs(&j.Args)
		case "env":
			return once(&seen, 9) && d.strs(&j.Env)
		case "work_dir":
			return once(&seen, 10) && d.str(&j.WorkDir)
		case "submit_dir":
			return once(&seen, 11) && d.str(&j.SubmitDir)
		case "submit_host":
			return once(&seen, 12) && d.str(&j.SubmitHost)
		case "output":
			return once(&seen, 13) && d.str(&j.Output)
		case "error":
			return once(&seen, 14) && d.str(&j.Error)
		case "image":
			return once(&seen, 15) && d.str(&j.Image)
		case "container":
			return once(&seen, 16) && d.strict(&j.Container) // rare: pyxis's options
		case "hold":
			return once(&seen, 17) && d.bool(&j.Hold)
		case "nice":
			return once(&seen, 18) && d.int(&j.Nice)
		case "begin_time":
			return once(&seen, 19) && d.time(&j.BeginTime)
		case "requeue":
			return once(&seen, 20) && d.bool(&j.Requeue)
		case "requeue_expedite":
			return once(&seen, 21) && d.bool(&j.RequeueExpedite)
		case "array":
			return once(&seen, 22) && d.str(&j.Array)
		case "dependency":
			return once(&seen, 23) && d.str(&j.Depend)
		case "signal":
			return once(&seen, 24) && d.str(&j.Signal)
		case "checkpoint_interval":
			return once(&seen, 25) && d.duration(&j.Ckpt)
		case "checkpoint_mode":
			return once(&seen, 26) && d.str(&j.CkptMode)
		case "comment":
			return once(&seen, 27) && d.str(&j.Comment)
		case "tasks":
			return once(&seen, 28) && d.submitTasks(&j.Tasks)
		case "open_mode":
			return once(&seen, 29) && d.str(&j.OpenMode)
		case "wckey":
			return once(&seen, 30) && d.str(&j.WCKey)
		case "interactive":
			return once(&seen, 31) && d.bool(&j.Interactive)
		case "reservation":
			return once(&seen, 32) && d.str(&j.Reservation)
		case "time_min":
			return once(&seen, 33) && d.duration(&j.TimeMin)
		}
		return false
	})
}

// submitResources is resources with each key taken once.
func (d *jobsDecoder) submitResources(r *spec.Resources) bool {
	var seen uint64
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "nodes":
			return once(&seen, 0) && d.int(&r.Nodes)
		case "max_nodes":
			return once(&seen, 1) && d.int(&r.MaxNodes)
		case "cpus_per_node":
			return once(&seen, 2) && d.int(&r.CPUsPerNode)
		case "mem_mib_per_node":
			n, ok := d.int64()
			r.MemMiB = n
			return once(&seen, 3) && ok
		case "mem_whole_node":
			return once(&seen, 4) && d.bool(&r.MemWholeNode)
		case "gpus_per_node":
			return once(&seen, 5) && d.int(&r.GPUsPerNode)
		case "gpu_model":
			return once(&seen, 6) && d.str(&r.GPUModel)
		case "gpu_profile":
			return once(&seen, 7) && d.str(&r.GPUProfile)
		case "gpu_fraction":
			return once(&seen, 8) && d.float(&r.GPUFraction)
		case "total_gpus":
			return once(&seen, 9) && d.int(&r.TotalGPUs)
		case "rdma":
			return once(&seen, 10) && d.int(&r.RDMA)
		case "exclusive":
			return once(&seen, 11) && d.bool(&r.Exclusive)
		case "nodelist":
			return once(&seen, 12) && d.strs(&r.NodeList)
		case "exclude":
			return once(&seen, 13) && d.strs(&r.Exclude)
		case "constraint":
			return once(&seen, 14) && d.str(&r.Constraint)
		}
		return false
	})
}

// submitTasks is tasks with each key taken once.
func (d *jobsDecoder) submitTasks(t *spec.Tasks) bool {
	var seen uint64
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "ntasks":
			return once(&seen, 0) && d.int(&t.NTasks)
		case "ntasks_per_node":
			return once(&seen, 1) && d.int(&t.NTasksPerNode)
		case "cpus_per_task":
			return once(&seen, 2) && d.int(&t.CPUsPerTask)
		case "gpus_per_task":
			return once(&seen, 3) && d.int(&t.GPUsPerTask)
		}
		return false
	})
}
