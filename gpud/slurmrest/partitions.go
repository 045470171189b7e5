package slurmrest

import (
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// partRec is a partition being written, with totals over its nodes.
type partRec struct {
	*api.Partition
	cluster    string
	defaultQOS string
	cpus, gpus int
	memMiB     int64
}

func minutes(w *jw, d time.Duration) {
	if d <= 0 {
		w.infinite()
		return
	}
	w.num(int64((d + time.Minute - 1) / time.Minute))
}

// partFields is partition_info (GET partitions, partition/{name}).
var partFields = newTable([]field[partRec]{
	f("nodes", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("allowed_allocation")
			w.str("")
			w.key("configured")
			w.str(hostlistOf(p.Nodes))
			w.key("total")
			w.int(int64(len(p.Nodes)))
		})
	}),
	f("accounts", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("allowed")
			w.str("")
			w.key("deny")
			w.str("")
		})
	}),
	f("groups", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("allowed")
			w.str("")
		})
	}),
	f("qos", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("allowed")
			w.str("")
			w.key("deny")
			w.str("")
			w.key("assigned")
			w.str(p.defaultQOS)
		})
	}),
	f("alternate", constStr[partRec]("")),
	f("tres", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("billing_weights")
			w.str("")
			w.key("configured")
			s := "cpu=" + strconv.Itoa(p.cpus) + ",mem=" + memString(p.memMiB) + ",node=" + strconv.Itoa(len(p.Nodes)) + ",billing=" + strconv.Itoa(p.cpus)
			if p.gpus > 0 {
				s += ",gres/gpu=" + strconv.Itoa(p.gpus)
			}
			w.str(s)
		})
	}),
	f("cluster", str(func(p *partRec) string { return p.cluster })),
	since(43, "topology", constStr[partRec]("")),
	until(44, "select_type", func(w *jw, _ *partRec) { w.strs([]string{"CPU", "MEMORY"}) }),
	since(45, "select_type", func(w *jw, _ *partRec) { w.strs([]string{"CR_CPU_MEMORY"}) }),
	until(44, "cpus", func(w *jw, p *partRec) { partCPUs(w, p, false) }),
	since(45, "cpus", func(w *jw, p *partRec) { partCPUs(w, p, true) }),
	f("defaults", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("memory_per_cpu")
			w.int(0)
			w.key("partition_memory_per_cpu")
			w.unset()
			w.key("partition_memory_per_node")
			w.unset()
			w.key("time")
			minutes(w, p.DefaultTime.Std())
			w.key("job")
			w.str("")
		})
	}),
	since(45, "flags", func(w *jw, p *partRec) {
		w.arr(func() {
			if p.Default {
				w.str("DEFAULT")
			}
		})
	}),
	f("grace_time", constInt[partRec](0)),
	f("maximums", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("cpus_per_node")
			w.infinite()
			w.key("cpus_per_socket")
			w.infinite()
			w.key("memory_per_cpu")
			w.int(0)
			w.key("partition_memory_per_cpu")
			w.unset()
			w.key("partition_memory_per_node")
			w.unset()
			w.key("nodes")
			w.infinite()
			w.key("shares")
			w.int(1)
			w.key("oversubscribe")
			w.obj(func() {
				w.key("jobs")
				w.int(1)
				w.key("flags")
				w.arr(func() {})
			})
			w.key("time")
			minutes(w, p.MaxTime.Std())
			w.key("over_time_limit")
			w.unset()
		})
	}),
	f("minimums", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("nodes")
			w.int(0)
		})
	}),
	f("name", str(func(p *partRec) string { return p.Name })),
	f("node_sets", constStr[partRec]("")),
	f("partition", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("state")
			w.strs([]string{p.State})
		})
	}),
	since(45, "preempt_mode", func(w *jw, _ *partRec) { w.strs([]string{"REQUEUE"}) }),
	f("priority", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("job_factor")
			w.int(1)
			w.key("tier")
			w.int(1)
		})
	}),
	f("timeouts", func(w *jw, p *partRec) {
		w.obj(func() {
			w.key("resume")
			w.unset()
			w.key("suspend")
			w.unset()
		})
	}),
	f("suspend_time", unsetNum[partRec]()),
})

// partCPUs writes a partition's cpus: task_binding became a list of
// flags in v0.0.45.
func partCPUs(w *jw, p *partRec, flags bool) {
	w.obj(func() {
		w.key("task_binding")
		if flags {
			w.arr(func() {})
		} else {
			w.int(0)
		}
		w.key("total")
		w.int(int64(p.cpus))
	})
}
