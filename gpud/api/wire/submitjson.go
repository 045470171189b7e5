package wire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"sync"

	"github.com/gpud/gpud/gpud/spec"
)

// MarshalJSON writes r as encoding/json does from its struct tags, byte
// for byte, without building encoding/json's encoders for JobSpec's types
// by reflection. That build is paid once per process: 200-350 µs, about a
// tenth of an sbatch process's CPU, for a request encoded once. Strings,
// string lists and floats still go through encoding/json (cheap: no
// struct). When spec's types have fields this encoder does not list (a
// field added since), it falls back to encoding/json;
// TestSubmitRequestJSON fails then, to have the lists below updated.
func (r SubmitRequest) MarshalJSON() ([]byte, error) {
	if !submitFieldsKnown() {
		type plain SubmitRequest // no MarshalJSON
		return json.Marshal(plain(r))
	}
	w := objWriter{b: make([]byte, 0, 512+len(r.Job.Script)+16*len(r.Job.Env))}
	w.open()
	w.key("job")
	appendJobSpec(&w, &r.Job)
	if len(r.Het) > 0 {
		w.key("het")
		w.b = append(w.b, '[')
		for i := range r.Het {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			appendJobSpec(&w, &r.Het[i])
		}
		w.b = append(w.b, ']')
	}
	if r.TestOnly {
		w.key("test_only")
		w.bool(true)
	}
	w.close()
	return w.b, w.err
}

func appendJobSpec(w *objWriter, j *spec.JobSpec) {
	w.open()
	w.str("name", j.Name, false)
	w.str("partition", j.Partition, false)
	w.str("qos", j.QOS, false)
	w.str("account", j.Account, false)
	w.key("resources")
	appendResources(w, &j.Resources)
	w.key("time_limit")
	w.b = j.TimeLimit.AppendJSON(w.b)
	if j.TimeUnlimited {
		w.key("time_unlimited")
		w.bool(true)
	}
	w.str("script", j.Script, false)
	w.strs("args", j.Args)
	w.strs("env", j.Env)
	w.str("work_dir", j.WorkDir, false)
	w.str("submit_dir", j.SubmitDir, false)
	w.str("submit_host", j.SubmitHost, true)
	w.str("output", j.Output, true)
	w.str("error", j.Error, true)
	w.str("image", j.Image, true)
	if j.Container != nil {
		// Rare (pyxis's options), so encoding/json's reflection is paid
		// only by the jobs that give them.
		w.key("container")
		w.value(j.Container)
	}
	if j.Hold {
		w.key("hold")
		w.bool(true)
	}
	w.int("nice", int64(j.Nice), true)
	w.key("begin_time")
	w.b = j.BeginTime.AppendJSON(w.b)
	w.key("requeue")
	w.bool(j.Requeue)
	if j.RequeueExpedite {
		w.key("requeue_expedite")
		w.bool(true)
	}
	w.str("array", j.Array, true)
	w.str("dependency", j.Depend, true)
	w.str("signal", j.Signal, true)
	if j.Ckpt != 0 {
		w.key("checkpoint_interval")
		w.b = j.Ckpt.AppendJSON(w.b)
	}
	w.str("checkpoint_mode", j.CkptMode, true)
	w.str("comment", j.Comment, true)
	if j.Tasks != (spec.Tasks{}) {
		t := &j.Tasks
		w.key("tasks")
		w.open()
		w.int("ntasks", int64(t.NTasks), true)
		w.int("ntasks_per_node", int64(t.NTasksPerNode), true)
		w.int("cpus_per_task", int64(t.CPUsPerTask), true)
		w.int("gpus_per_task", int64(t.GPUsPerTask), true)
		w.close()
	}
	w.str("open_mode", j.OpenMode, true)
	w.str("wckey", j.WCKey, true)
	if j.Interactive {
		w.key("interactive")
		w.bool(true)
	}
	w.str("reservation", j.Reservation, true)
	if j.TimeMin != 0 {
		w.key("time_min")
		w.b = j.TimeMin.AppendJSON(w.b)
	}
	w.close()
}

func appendResources(w *objWriter, r *spec.Resources) {
	w.open()
	w.int("nodes", int64(r.Nodes), false)
	w.int("max_nodes", int64(r.MaxNodes), true)
	w.int("cpus_per_node", int64(r.CPUsPerNode), false)
	w.int("mem_mib_per_node", r.MemMiB, false)
	if r.MemWholeNode {
		w.key("mem_whole_node")
		w.bool(true)
	}
	w.int("gpus_per_node", int64(r.GPUsPerNode), false)
	w.str("gpu_model", r.GPUModel, true)
	w.str("gpu_profile", r.GPUProfile, true)
	if r.GPUFraction != 0 {
		w.key("gpu_fraction")
		w.value(r.GPUFraction)
	}
	w.int("total_gpus", int64(r.TotalGPUs), true)
	w.int("rdma", int64(r.RDMA), true)
	if r.Exclusive {
		w.key("exclusive")
		w.bool(true)
	}
	w.strs("nodelist", r.NodeList)
	w.strs("exclude", r.Exclude)
	w.str("constraint", r.Constraint, true)
	w.close()
}

// objWriter appends JSON objects; first says no member has been written
// in the innermost open object.
type objWriter struct {
	b     []byte
	first bool
	err   error
}

func (w *objWriter) open()  { w.b, w.first = append(w.b, '{'), true }
func (w *objWriter) close() { w.b, w.first = append(w.b, '}'), false }

func (w *objWriter) key(k string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(append(append(w.b, '"'), k...), '"', ':')
}

func (w *objWriter) bool(v bool) { w.b = strconv.AppendBool(w.b, v) }

func (w *objWriter) int(k string, v int64, omitEmpty bool) {
	if omitEmpty && v == 0 {
		return
	}
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *objWriter) str(k, v string, omitEmpty bool) {
	if omitEmpty && v == "" {
		return
	}
	w.key(k)
	w.value(v)
}

func (w *objWriter) strs(k string, v []string) {
	if len(v) == 0 { // omitempty
		return
	}
	w.key(k)
	w.value(v)
}

// value appends v as encoding/json writes it (its escaping of strings,
// its float format).
func (w *objWriter) value(v any) {
	b, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.b = append(w.b, b...)
}

// submitFields lists, field by field, the struct fields MarshalJSON
// writes: name and json tag.
var submitFields = map[reflect.Type][][2]string{
	reflect.TypeFor[SubmitRequest](): {{"Job", "job"}, {"Het", "het,omitempty"}, {"TestOnly", "test_only,omitempty"}, {"IdempotencyKey", "-"}},
	reflect.TypeFor[spec.JobSpec](): {{"Name", "name"}, {"Partition", "partition"}, {"QOS", "qos"}, {"Account", "account"},
		{"Resources", "resources"}, {"TimeLimit", "time_limit"}, {"TimeUnlimited", "time_unlimited,omitempty"}, {"Script", "script"},
		{"Args", "args,omitempty"}, {"Env", "env,omitempty"}, {"WorkDir", "work_dir"}, {"SubmitDir", "submit_dir"},
		{"SubmitHost", "submit_host,omitempty"}, {"Output", "output,omitempty"}, {"Error", "error,omitempty"},
		{"Image", "image,omitempty"}, {"Container", "container,omitempty"}, {"Hold", "hold,omitempty"},
		{"Nice", "nice,omitempty"}, {"BeginTime", "begin_time"}, {"Requeue", "requeue"},
		{"RequeueExpedite", "requeue_expedite,omitempty"}, {"Array", "array,omitempty"},
		{"Depend", "dependency,omitempty"}, {"Signal", "signal,omitempty"}, {"Ckpt", "checkpoint_interval,omitempty"},
		{"CkptMode", "checkpoint_mode,omitempty"}, {"Comment", "comment,omitempty"}, {"Tasks", "tasks,omitzero"},
		{"OpenMode", "open_mode,omitempty"}, {"WCKey", "wckey,omitempty"}, {"Interactive", "interactive,omitempty"},
		{"Reservation", "reservation,omitempty"}, {"TimeMin", "time_min,omitempty"}},
	reflect.TypeFor[spec.Resources](): {{"Nodes", "nodes"}, {"MaxNodes", "max_nodes,omitempty"}, {"CPUsPerNode", "cpus_per_node"}, {"MemMiB", "mem_mib_per_node"},
		{"MemWholeNode", "mem_whole_node,omitempty"}, {"GPUsPerNode", "gpus_per_node"}, {"GPUModel", "gpu_model,omitempty"},
		{"GPUProfile", "gpu_profile,omitempty"}, {"GPUFraction", "gpu_fraction,omitempty"}, {"TotalGPUs", "total_gpus,omitempty"},
		{"RDMA", "rdma,omitempty"}, {"Exclusive", "exclusive,omitempty"}, {"NodeList", "nodelist,omitempty"},
		{"Exclude", "exclude,omitempty"}, {"Constraint", "constraint,omitempty"}},
	reflect.TypeFor[spec.Tasks](): {{"NTasks", "ntasks,omitempty"}, {"NTasksPerNode", "ntasks_per_node,omitempty"},
		{"CPUsPerTask", "cpus_per_task,omitempty"}, {"GPUsPerTask", "gpus_per_task,omitempty"}},
}

// submitFieldsKnown reports whether the types still have exactly the
// fields of submitFields, in order, with those tags (a few µs, once).
var submitFieldsKnown = sync.OnceValue(func() bool {
	for t, want := range submitFields {
		if t.NumField() != len(want) {
			return false
		}
		for i, nt := range want {
			f := t.Field(i)
			if f.Name != nt[0] || string(f.Tag) != `json:"`+nt[1]+`"` {
				return false
			}
		}
	}
	return true
})
