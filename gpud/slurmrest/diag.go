package slurmrest

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Counters counts what diag reports since the controller started. Its
// methods are those of controller.Observer, so gpud main hands it to the
// controller beside the Prometheus observer; they are cheap and never
// block. Every counter is 64-bit: a busy controller passes 2^31 jobs,
// and Slurm's own int32 counters then wrap (the bindings that decoded
// them as int32 broke, soperator PR 2803).
type Counters struct {
	started, completed, cancelled, failed, backfilled atomic.Int64
	cycles, cycleSumUS, cycleMaxUS, cycleLastUS       atomic.Int64
	lastCycle                                         atomic.Int64 // Unix seconds
}

// CycleDone counts a scheduling cycle of d.
func (c *Counters) CycleDone(d time.Duration) {
	us := d.Microseconds()
	c.cycles.Add(1)
	c.cycleSumUS.Add(us)
	c.cycleLastUS.Store(us)
	for {
		m := c.cycleMaxUS.Load()
		if us <= m || c.cycleMaxUS.CompareAndSwap(m, us) {
			break
		}
	}
	c.lastCycle.Store(time.Now().Unix())
}

// JobStarted counts a start.
func (c *Counters) JobStarted(string) { c.started.Add(1) }

// JobEnded counts an end by its state.
func (c *Counters) JobEnded(_ string, st spec.JobState) {
	switch st {
	case spec.StateCompleted:
		c.completed.Add(1)
	case spec.StateCancelled:
		c.cancelled.Add(1)
	default:
		c.failed.Add(1)
	}
}

// JobRequeued, JobPreempted and JobIdle are not in diag.
func (c *Counters) JobRequeued(string, string)  {}
func (c *Counters) JobPreempted(string, string) {}
func (c *Counters) JobIdle(string, string)      {}

// JobBackfilled counts a backfill start.
func (c *Counters) JobBackfilled(string) { c.backfilled.Add(1) }

// diag is GET diag/ (sdiag).
func diag(c *call) {
	var out api.JobsResponse
	if !c.get("/v1/jobs?view=brief", &out, errInvalidJobID) {
		return
	}
	var pending, running int64
	for i := range out.Jobs {
		switch out.Jobs[i].State {
		case spec.StatePending:
			pending++
		case spec.StateRunning, spec.StateCompleting:
			running++
		}
	}
	k := c.h.o.Counters
	if k == nil {
		k = &Counters{}
		c.warn("this controller keeps no diag counters: jobs_started, jobs_completed and the cycle figures read 0", "")
	}
	c.warn("gpud does not count submissions: jobs_submitted reads 0; the jobs it keeps are in GET jobs/", "jobs_submitted")
	now := c.h.o.Now()
	cycles := k.cycles.Load()
	mean := int64(0)
	if cycles > 0 {
		mean = k.cycleSumUS.Load() / cycles
	}
	ints := func(w *jw, kv ...any) {
		for i := 0; i < len(kv); i += 2 {
			w.key(kv[i].(string))
			w.int(kv[i+1].(int64))
		}
	}
	c.reply(func(w *jw) {
		w.key("statistics")
		w.obj(func() {
			if c.v < 45 {
				w.key("parts_packed")
				w.int(0)
			}
			w.key("req_time")
			w.num(now.Unix())
			w.key("req_time_start")
			w.num(c.h.o.Started.Unix())
			ints(w, "server_thread_count", int64(1), "agent_queue_size", int64(0), "agent_count", int64(0), "agent_thread_count", int64(0), "dbd_agent_queue_size", int64(0), "gettimeofday_latency", int64(0),
				"schedule_cycle_max", k.cycleMaxUS.Load(), "schedule_cycle_last", k.cycleLastUS.Load(), "schedule_cycle_sum", k.cycleSumUS.Load(),
				"schedule_cycle_total", cycles, "schedule_cycle_mean", mean, "schedule_cycle_mean_depth", int64(0),
				"schedule_cycle_per_minute", perMinute(cycles, now.Sub(c.h.o.Started)), "schedule_cycle_depth", int64(0))
			w.key("schedule_exit")
			w.obj(func() {
				ints(w, "end_job_queue", cycles, "default_queue_depth", int64(0), "max_job_start", int64(0), "max_rpc_cnt", int64(0), "max_sched_time", int64(0), "licenses", int64(0))
			})
			ints(w, "schedule_queue_length", pending,
				"jobs_submitted", int64(0), "jobs_started", k.started.Load(), "jobs_completed", k.completed.Load(),
				"jobs_canceled", k.cancelled.Load(), "jobs_failed", k.failed.Load(), "jobs_pending", pending, "jobs_running", running)
			w.key("job_states_ts")
			w.num(now.Unix())
			ints(w, "bf_backfilled_jobs", k.backfilled.Load(), "bf_last_backfilled_jobs", int64(0), "bf_backfilled_het_jobs", int64(0),
				"bf_cycle_counter", cycles, "bf_cycle_mean", mean, "bf_depth_mean", int64(0), "bf_depth_mean_try", int64(0), "bf_cycle_sum", k.cycleSumUS.Load(),
				"bf_cycle_last", k.cycleLastUS.Load(), "bf_cycle_max", k.cycleMaxUS.Load())
			w.key("bf_exit")
			w.obj(func() {
				ints(w, "end_job_queue", cycles, "bf_max_job_start", int64(0), "bf_max_job_test", int64(0), "bf_max_time", int64(0), "bf_node_space_size", int64(0), "state_changed", int64(0))
			})
			ints(w, "bf_last_depth", int64(0), "bf_last_depth_try", int64(0), "bf_depth_sum", int64(0), "bf_depth_try_sum", int64(0), "bf_queue_len", pending,
				"bf_queue_len_mean", int64(0), "bf_queue_len_sum", int64(0), "bf_table_size", int64(0), "bf_table_size_sum", int64(0), "bf_table_size_mean", int64(0))
			w.key("bf_when_last_cycle")
			if t := k.lastCycle.Load(); t > 0 {
				w.num(t)
			} else {
				w.unset()
			}
			w.key("bf_active")
			w.bool(false)
			for _, name := range []string{"rpcs_by_message_type", "rpcs_by_user", "pending_rpcs", "pending_rpcs_by_hostlist"} {
				w.key(name)
				w.arr(func() {})
			}
		})
	})
}

func perMinute(n int64, d time.Duration) int64 {
	if d < time.Minute {
		return n
	}
	return n * int64(time.Minute) / int64(d)
}

// shares is GET shares (sshare): the fairshare tree.
func shares(c *call) {
	if !c.queryKnown("accounts", "users") {
		return
	}
	var out api.FairshareResponse
	if !c.get("/v1/fairshare", &out, errInvalidAccount) {
		return
	}
	q := c.r.URL.Query()
	accounts, users := splitCSV(q.Get("accounts")), splitCSV(q.Get("users"))
	var total int64
	for _, r := range out.Rows {
		if r.User == "" && r.Depth == 1 {
			total += int64(r.RawShares)
		}
	}
	c.reply(func(w *jw) {
		w.key("shares")
		w.obj(func() {
			w.key("shares")
			w.arr(func() {
				for i, r := range out.Rows {
					if len(accounts) > 0 && !slices.Contains(accounts, r.Account) || len(users) > 0 && r.User != "" && !slices.Contains(users, r.User) {
						continue
					}
					w.obj(func() {
						w.key("id")
						w.int(int64(i + 1))
						w.key("cluster")
						w.str(c.h.o.Cluster)
						name, parent, kind := r.Account, r.Parent, "ASSOCIATION"
						if r.User != "" {
							name, parent, kind = r.User, r.Account, "USER"
						}
						if parent == "" {
							parent = "root"
						}
						w.key("name")
						w.str(name)
						w.key("parent")
						w.str(parent)
						w.key("partition")
						w.str("")
						w.key("shares_normalized")
						w.fnum(r.NormShares)
						w.key("shares")
						w.num(int64(r.RawShares))
						w.key("tres")
						w.obj(func() {
							w.key("run_seconds")
							w.arr(func() {})
							w.key("group_minutes")
							w.arr(func() {})
							w.key("usage")
							w.arr(func() {})
						})
						w.key("effective_usage")
						w.fnum(r.EffectiveUsage)
						w.key("usage_normalized")
						w.fnum(r.NormUsage)
						w.key("usage")
						w.int(int64(r.RawUsage))
						w.key("fairshare")
						w.obj(func() {
							w.key("factor")
							w.fnum(r.Factor)
							w.key("level")
							if r.LevelFS != nil {
								w.fnum(*r.LevelFS)
							} else {
								w.infinite()
							}
						})
						w.key("type")
						w.strs([]string{kind})
					})
				}
			})
			w.key("total_shares")
			w.int(total)
		})
	})
}

func splitCSV(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// conf is GET conf (v0.0.45, scontrol show config): what of Slurm's
// configuration has a meaning in gpud.
func conf(c *call) {
	if !c.queryKnown("update_time") {
		return
	}
	var parts api.PartitionsResponse
	if !c.get("/v1/partitions", &parts, errInvalidPartition) {
		return
	}
	c.warn("only the settings that have a meaning in gpud are shown; the rest is gpud.toml's (gpud.toml(5))", "")
	now := c.h.o.Now()
	c.reply(func(w *jw) {
		w.key("slurm_conf")
		w.obj(func() {
			w.key("ClusterName")
			w.str(c.h.o.Cluster)
			w.key("SchedulerType")
			w.str("sched/backfill")
			w.key("SelectType")
			w.str("select/cons_tres")
			w.key("SelectTypeParameters")
			w.strs([]string{"CR_CPU_MEMORY"})
			w.key("PriorityType")
			w.str("priority/multifactor")
			w.key("AccountingStorageType")
			w.str("accounting_storage/gpud")
			w.key("GresTypes")
			w.strs([]string{"gpu"})
			w.key("controllers")
			w.arr(func() {
				w.obj(func() {
					w.key("machine")
					w.str(c.h.o.Hostname)
					w.key("address")
					w.str(c.h.o.Hostname)
				})
			})
		})
		w.key("slurm_conf_meta")
		w.obj(func() {
			w.key("LastUpdate")
			w.int(now.Unix())
			w.key("BOOT_TIME")
			w.int(c.h.o.Started.Unix())
			w.key("SLURM_VERSION")
			w.str(slurmMajor + "." + slurmMinor + "." + slurmMicro)
		})
	})
}
