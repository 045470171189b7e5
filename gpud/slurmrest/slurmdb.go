package slurmrest

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// The slurmdb answers come from gpud's accounting (job history) and from
// gpud.toml's accounts and QOS (GET /v1/associations), which the API
// reads and never writes: sacctmgr's changes are edits of gpud.toml.

const (
	emptyDBJobs   = `"jobs":[]`
	emptyAccounts = `"accounts":[]`
	emptyUsers    = `"users":[]`
	emptyAssocs   = `"associations":[]`
	emptyQOS      = `"qos":[]`
	emptyTRES     = `"TRES":[]`
	emptyClusters = `"clusters":[]`
	emptyWCKeys   = `"wckeys":[]`
	emptyInst     = `"instances":[]`
	emptyConfig   = `"clusters":[],"tres":[],"accounts":[],"users":[],"qos":[],"wckeys":[],"associations":[]`
)

// acctRec is an accounting record being written.
type acctRec struct {
	*api.AcctJob
	cluster string
}

func tresList(w *jw, items ...tresItem) {
	w.arr(func() {
		for _, t := range items {
			if t.count < 0 {
				continue
			}
			w.obj(func() {
				w.key("type")
				w.str(t.typ)
				w.key("name")
				w.str(t.name)
				w.key("id")
				w.int(int64(t.id))
				w.key("count")
				w.int(t.count)
			})
		}
	})
}

// tresItem is one TRES of Slurm's TRES table; gpud's ids are Slurm's
// for cpu (1), mem (2), node (4) and billing (5); gres/gpu is 1001.
type tresItem struct {
	typ, name string
	id        int
	count     int64
}

func acctTres(j *api.AcctJob) []tresItem {
	n := int64(len(j.Nodes))
	items := []tresItem{{typ: "cpu", id: 1, count: int64(j.CPUs)}, {typ: "mem", id: 2, count: j.MemMiB}, {typ: "node", id: 4, count: max(n, 1)}, {typ: "billing", id: 5, count: int64(j.CPUs)}}
	if j.GPUCount > 0 {
		items = append(items, tresItem{typ: "gres", name: "gpu", id: 1001, count: int64(j.GPUCount)})
	}
	return items
}

func secs(t spec.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// acctFields is job (slurmdb jobs, job/{id}: sacct).
var acctFields = newTable([]field[acctRec]{
	f("account", str(func(j *acctRec) string { return j.Account })),
	f("comment", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("administrator")
			w.str("")
			w.key("job")
			w.str("")
			w.key("system")
			w.str("")
		})
	}),
	f("allocation_nodes", func(w *jw, j *acctRec) { w.int(int64(len(j.Nodes))) }),
	f("array", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("job_id")
			w.uint(uint64(j.ArrayJobID))
			w.key("limits")
			w.obj(func() {
				w.key("max")
				w.obj(func() {
					w.key("running")
					w.obj(func() {
						w.key("tasks")
						w.int(0)
					})
				})
			})
			w.key("task_id")
			w.numIf(j.ArrayJobID != 0, int64(j.ArrayTaskID))
			w.key("task")
			w.str("")
		})
	}),
	f("association", func(w *jw, j *acctRec) { assocShort(w, j.cluster, j.Account, j.User, "") }),
	f("block", constStr[acctRec]("")),
	f("cluster", str(func(j *acctRec) string { return j.cluster })),
	f("constraints", constStr[acctRec]("")),
	f("container", constStr[acctRec]("")),
	since(45, "sluid", constStr[acctRec]("")),
	f("derived_exit_code", func(w *jw, j *acctRec) { exitCode(w, j.State, j.ExitCode, j.Signal) }),
	f("time", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("elapsed")
			w.int(j.Elapsed)
			w.key("eligible")
			w.int(secs(j.EligibleTime))
			w.key("end")
			w.int(secs(j.EndTime))
			w.key("planned")
			w.unset()
			w.key("start")
			w.int(secs(j.StartTime))
			w.key("submission")
			w.int(secs(j.SubmitTime))
			w.key("suspended")
			w.int(0)
			for _, k := range []string{"system", "total", "user"} {
				w.key(k)
				w.obj(func() {
					w.key("seconds")
					w.int(0)
					w.key("microseconds")
					w.int(0)
				})
			}
			w.key("limit")
			timeLimit(w, j.TimeLimit, false)
		})
	}),
	since(45, "exclusive", constStr[acctRec]("")),
	f("exit_code", func(w *jw, j *acctRec) { exitCode(w, j.State, j.ExitCode, j.Signal) }),
	f("extra", constStr[acctRec]("")),
	f("failed_node", constStr[acctRec]("")),
	f("flags", emptyList[acctRec]()),
	f("group", constStr[acctRec]("")),
	f("het", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("job_id")
			w.int(0)
			w.key("job_offset")
			w.unset()
		})
	}),
	f("job_id", func(w *jw, j *acctRec) { w.uint(uint64(j.ID)) }),
	f("name", str(func(j *acctRec) string { return j.Name })),
	f("licenses", constStr[acctRec]("")),
	f("mcs", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("label")
			w.str("")
		})
	}),
	f("nodes", func(w *jw, j *acctRec) { w.str(hostlistOf(j.Nodes)) }),
	since(45, "oversubscribe", constStr[acctRec]("")),
	f("partition", str(func(j *acctRec) string { return j.Partition })),
	f("hold", constBool[acctRec](false)),
	f("priority", unsetNum[acctRec]()),
	f("qos", str(func(j *acctRec) string { return j.QOS })),
	f("qosreq", str(func(j *acctRec) string { return j.QOS })),
	f("required", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("CPUs")
			w.int(int64(j.CPUs))
			w.key("memory_per_cpu")
			w.unset()
			w.key("memory_per_node")
			w.numIf(j.MemMiB > 0, j.MemMiB/max(int64(len(j.Nodes)), 1))
		})
	}),
	f("kill_request_user", constStr[acctRec]("")),
	f("restart_cnt", func(w *jw, j *acctRec) { w.int(int64(max(j.Attempts-1, 0))) }),
	f("reservation", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("id")
			w.int(0)
			w.key("name")
			w.str("")
		})
	}),
	f("script", constStr[acctRec]("")),
	since(43, "segment_size", constInt[acctRec](0)),
	since(45, "original_sluid", constStr[acctRec]("")),
	f("state", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("current")
			w.strs([]string{string(j.State)})
			w.key("reason")
			w.str(firstNonEmpty(j.Reason, spec.ReasonNone))
		})
	}),
	f("steps", func(w *jw, j *acctRec) {
		w.arr(func() {
			for i := range j.Steps {
				stepFields.write(w, wv(w), &stepRec{AcctStep: &j.Steps[i], job: j.AcctJob})
			}
		})
	}),
	f("submit_line", constStr[acctRec]("")),
	f("tres", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("allocated")
			if j.StartTime.IsZero() {
				tresList(w)
			} else {
				tresList(w, acctTres(j.AcctJob)...)
			}
			w.key("requested")
			tresList(w, acctTres(j.AcctJob)...)
		})
	}),
	f("used_gres", func(w *jw, j *acctRec) {
		if j.GPUCount > 0 {
			w.str("gpu:" + strconv.Itoa(j.GPUCount))
			return
		}
		w.str("")
	}),
	f("user", str(func(j *acctRec) string { return j.User })),
	f("wckey", func(w *jw, j *acctRec) {
		w.obj(func() {
			w.key("wckey")
			w.str(j.WCKey)
			w.key("flags")
			w.arr(func() {})
		})
	}),
	f("working_directory", str(func(j *acctRec) string { return j.WorkDir })),
})

// wv is the version a nested table is written in: the writer carries it
// for the one nested table (steps) that needs it.
func wv(w *jw) int { return w.v }

// stepRec is a step of an accounting record.
type stepRec struct {
	*api.AcctStep
	job *api.AcctJob
}

var stepFields = newTable([]field[stepRec]{
	f("time", func(w *jw, s *stepRec) {
		w.obj(func() {
			w.key("elapsed")
			w.int(s.Elapsed)
			w.key("end")
			w.numIf(!s.EndTime.IsZero(), secs(s.EndTime))
			w.key("start")
			w.numIf(!s.StartTime.IsZero(), secs(s.StartTime))
			w.key("suspended")
			w.int(0)
		})
	}),
	f("exit_code", func(w *jw, s *stepRec) { exitCode(w, s.State, s.ExitCode, s.Signal) }),
	f("nodes", func(w *jw, s *stepRec) {
		w.obj(func() {
			w.key("count")
			w.int(int64(len(s.Nodes)))
			w.key("range")
			w.str(hostlistOf(s.Nodes))
			w.key("list")
			w.strs(s.Nodes)
		})
	}),
	f("tasks", func(w *jw, s *stepRec) {
		w.obj(func() {
			w.key("count")
			w.int(int64(s.NTasks))
		})
	}),
	f("kill_request_user", constStr[stepRec]("")),
	f("state", func(w *jw, s *stepRec) { w.strs([]string{string(firstState(s.State))}) }),
	f("step", func(w *jw, s *stepRec) {
		w.obj(func() {
			w.key("id")
			w.str(strconv.FormatUint(uint64(s.job.ID), 10) + "." + s.ID)
			w.key("name")
			w.str(s.Name)
		})
	}),
	since(45, "submit_line", constStr[stepRec]("")),
})

func firstState(s spec.JobState) spec.JobState {
	if s == "" {
		return spec.StateRunning
	}
	return s
}

// acctQuery maps slurmdb jobs' query (sacct's filters) to /v1's.
func (c *call) acctQuery() (url.Values, bool) {
	q := c.r.URL.Query()
	out := url.Values{"steps": {"true"}}
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "users":
			for _, u := range splitCSV(v) {
				out.Add("user", u)
			}
		case "account":
			for _, a := range splitCSV(v) {
				out.Add("account", a)
			}
		case "partition":
			for _, p := range splitCSV(v) {
				out.Add("partition", p)
			}
		case "state":
			for _, s := range splitCSV(v) {
				out.Add("state", strings.ToUpper(s))
			}
		case "job_name", "qos":
			// Filtered after the query (below).
		case "start_time", "end_time":
			t, err := parseSacctTime(v, c.h.o.Now())
			if err != nil {
				c.fail(http.StatusBadRequest, errInvalidTimeValue, fmt.Sprintf("%s=%q: %v", k, clipText(v), err), k)
				return nil, false
			}
			out.Set(map[string]string{"start_time": "start", "end_time": "end"}[k], t.UTC().Format(time.RFC3339))
		case "skip_steps":
			if v == "true" {
				out.Del("steps")
			}
		case "submit_time":
			c.warn("submit_time has no effect in gpud's job history query; use start_time and end_time", k)
		default:
			c.warn(fmt.Sprintf("query parameter %s has no effect in gpud's job history; ignored", clipText(k)), k)
		}
	}
	return out, true
}

// parseSacctTime reads sacct's time forms: Unix seconds, an RFC 3339 or
// YYYY-MM-DD[THH:MM[:SS]] time, or MM/DD[/YY].
func parseSacctTime(s string, now time.Time) (time.Time, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02", "01/02/06", "01/02"} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			if layout == "01/02" {
				t = t.AddDate(now.Year(), 0, 0)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not a time; use Unix seconds, YYYY-MM-DD[THH:MM[:SS]] or MM/DD[/YY]")
}

// dbJobs is GET slurmdb jobs/ (sacct).
func dbJobs(c *call) {
	q, ok := c.acctQuery()
	if !ok {
		return
	}
	var out api.AcctJobsResponse
	if !c.get("/v1/accounting/jobs?"+q.Encode(), &out, errInvalidJobID) {
		return
	}
	names, qos := splitCSV(c.r.URL.Query().Get("job_name")), splitCSV(c.r.URL.Query().Get("qos"))
	jobs := out.Jobs[:0]
	for _, j := range out.Jobs {
		if len(names) > 0 && !slices.Contains(names, j.Name) || len(qos) > 0 && !slices.Contains(qos, j.QOS) {
			continue
		}
		jobs = append(jobs, j)
	}
	c.writeAcct(jobs)
}

func (c *call) writeAcct(jobs []api.AcctJob) {
	c.reply(func(w *jw) {
		w.key("jobs")
		w.arr(func() {
			for i := range jobs {
				acctFields.write(w, c.v, &acctRec{AcctJob: &jobs[i], cluster: c.h.o.Cluster})
			}
		})
	})
}

// dbJob is GET slurmdb job/{job_id} (sacct -j).
func dbJob(c *call) {
	id, err := strconv.ParseUint(c.param, 10, 64)
	if err != nil || id == 0 {
		c.fail(http.StatusBadRequest, errInvalidJobID, fmt.Sprintf("job id %q: give a job id", clipText(c.param)), "job_id")
		return
	}
	var out api.AcctJobsResponse
	if !c.get("/v1/accounting/jobs?steps=true&id="+strconv.FormatUint(id, 10), &out, errInvalidJobID) {
		return
	}
	if len(out.Jobs) == 0 {
		// As /v1 answers: nothing to show is not an error.
		c.warn(fmt.Sprintf("job %d is not in the job history: a job is written there when it ends, and users see only their own", id), "job_id")
	}
	c.writeAcct(out.Jobs)
}

// assocShort writes an assoc_short.
func assocShort(w *jw, cluster, account, user, partition string) {
	w.obj(func() {
		w.key("account")
		w.str(account)
		w.key("cluster")
		w.str(cluster)
		w.key("id")
		w.int(0)
		w.key("partition")
		w.str(partition)
		w.key("user")
		w.str(user)
	})
}

func (c *call) associations() (api.AssociationsResponse, bool) {
	var a api.AssociationsResponse
	ok := c.get("/v1/associations", &a, errInvalidAccount)
	return a, ok
}

func writeAccount(w *jw, cluster string, a *api.AssocAccount) {
	w.obj(func() {
		w.key("associations")
		w.arr(func() {
			assocShort(w, cluster, a.Name, "", "")
			for _, u := range a.Users {
				assocShort(w, cluster, a.Name, u, "")
			}
		})
		w.key("coordinators")
		w.arr(func() {
			for _, u := range a.Coordinators {
				w.obj(func() {
					w.key("name")
					w.str(u)
					w.key("direct")
					w.bool(true)
				})
			}
		})
		w.key("description")
		w.str(a.Name)
		w.key("name")
		w.str(a.Name)
		w.key("organization")
		w.str(firstNonEmpty(a.Parent, a.Name))
		w.key("flags")
		w.arr(func() {})
	})
}

// dbAccounts is GET accounts/ and account/{name} (sacctmgr show account).
func dbAccounts(c *call) {
	a, ok := c.associations()
	if !ok {
		return
	}
	accts := a.Accounts
	if c.param != "" {
		i := slices.IndexFunc(accts, func(x api.AssocAccount) bool { return x.Name == c.param })
		if i < 0 {
			c.fail(http.StatusNotFound, errInvalidAccount, fmt.Sprintf("no account %q in gpud.toml", clipText(c.param)), "account_name")
			return
		}
		accts = accts[i : i+1]
	}
	c.reply(func(w *jw) {
		w.key("accounts")
		w.arr(func() {
			for i := range accts {
				writeAccount(w, c.h.o.Cluster, &accts[i])
			}
		})
	})
}

// userAccounts is, per user, the accounts that list them.
func userAccounts(a api.AssociationsResponse) (names []string, of map[string][]string) {
	of = map[string][]string{}
	for _, acct := range a.Accounts {
		for _, u := range acct.Users {
			if _, seen := of[u]; !seen {
				names = append(names, u)
			}
			of[u] = append(of[u], acct.Name)
		}
	}
	slices.Sort(names)
	return names, of
}

// dbUsers is GET users/ and user/{name} (sacctmgr show user).
func dbUsers(c *call) {
	a, ok := c.associations()
	if !ok {
		return
	}
	names, of := userAccounts(a)
	if c.param != "" {
		if !slices.Contains(names, c.param) {
			c.fail(http.StatusNotFound, errInvalidAccount, fmt.Sprintf("no user %q in gpud.toml's accounts", clipText(c.param)), "name")
			return
		}
		names = []string{c.param}
	}
	c.reply(func(w *jw) {
		w.key("users")
		w.arr(func() {
			for _, u := range names {
				w.obj(func() {
					w.key("administrator_level")
					w.strs([]string{"None"})
					w.key("associations")
					w.arr(func() {
						for _, acct := range of[u] {
							assocShort(w, c.h.o.Cluster, acct, u, "")
						}
					})
					w.key("coordinators")
					w.arr(func() {})
					w.key("default")
					w.obj(func() {
						w.key("account")
						w.str(of[u][0])
						w.key("wckey")
						w.str("")
					})
					w.key("flags")
					w.arr(func() {})
					w.key("name")
					w.str(u)
				})
			}
		})
	})
}

func limit(w *jw, n int) {
	if n > 0 {
		w.num(int64(n))
	} else {
		w.infinite()
	}
}

func writeAssoc(w *jw, cluster string, a *api.AssocAccount, user, defQOS string, shares int) {
	w.obj(func() {
		w.key("account")
		w.str(a.Name)
		w.key("cluster")
		w.str(cluster)
		w.key("comment")
		w.str("")
		w.key("default")
		w.obj(func() {
			w.key("qos")
			w.str(defQOS)
		})
		w.key("flags")
		w.arr(func() {})
		w.key("id")
		w.int(0)
		w.key("is_default")
		w.bool(false)
		w.key("lineage")
		w.str("/" + a.Name + "/")
		w.key("max")
		w.obj(func() {
			w.key("jobs")
			w.obj(func() {
				w.key("active")
				limit(w, a.MaxJobs)
				w.key("total")
				limit(w, a.MaxSubmitJobs)
			})
			w.key("tres")
			w.obj(func() {
				w.key("total")
				if a.MaxGPUs > 0 {
					tresList(w, tresItem{typ: "gres", name: "gpu", id: 1001, count: int64(a.MaxGPUs)})
				} else {
					tresList(w)
				}
			})
			w.key("per")
			w.obj(func() {
				w.key("account")
				w.obj(func() {
					w.key("wall_clock")
					limit(w, int(a.MaxWall.Std()/time.Minute))
				})
			})
		})
		w.key("parent_account")
		w.str(a.Parent)
		w.key("partition")
		w.str("")
		w.key("qos")
		w.strs(nil)
		w.key("shares_raw")
		w.int(int64(shares))
		w.key("user")
		w.str(user)
	})
}

// dbAssociations is GET associations/ and association/ (sacctmgr show
// assoc): an account row and a row per user of it.
func dbAssociations(c *call) {
	a, ok := c.associations()
	if !ok {
		return
	}
	q := c.r.URL.Query()
	accounts, users := splitCSV(q.Get("account")), splitCSV(q.Get("user"))
	c.reply(func(w *jw) {
		w.key("associations")
		w.arr(func() {
			for i := range a.Accounts {
				acct := &a.Accounts[i]
				if len(accounts) > 0 && !slices.Contains(accounts, acct.Name) {
					continue
				}
				if len(users) == 0 {
					writeAssoc(w, c.h.o.Cluster, acct, "", a.DefaultQOS, acct.Shares)
				}
				for _, u := range acct.Users {
					if len(users) == 0 || slices.Contains(users, u) {
						writeAssoc(w, c.h.o.Cluster, acct, u, a.DefaultQOS, 1)
					}
				}
			}
		})
	})
}

// dbQOS is GET qos/ and qos/{name}.
func dbQOS(c *call) {
	a, ok := c.associations()
	if !ok {
		return
	}
	qs := a.QOS
	if c.param != "" {
		i := slices.IndexFunc(qs, func(q api.AssocQOS) bool { return q.Name == c.param })
		if i < 0 {
			c.fail(http.StatusNotFound, errInvalidQOS, fmt.Sprintf("no QOS %q in gpud.toml", clipText(c.param)), "qos")
			return
		}
		qs = qs[i : i+1]
	}
	c.reply(func(w *jw) {
		w.key("qos")
		w.arr(func() {
			for i, q := range qs {
				w.obj(func() {
					w.key("description")
					w.str(q.Name)
					w.key("flags")
					w.arr(func() {})
					w.key("id")
					w.int(int64(i + 1))
					w.key("limits")
					w.obj(func() {
						w.key("max")
						w.obj(func() {
							w.key("jobs")
							w.obj(func() {
								w.key("active_jobs")
								w.obj(func() {
									w.key("per")
									w.obj(func() {
										w.key("user")
										limit(w, q.MaxJobsPerUser)
									})
								})
							})
							w.key("tres")
							w.obj(func() {
								w.key("per")
								w.obj(func() {
									w.key("user")
									if q.MaxGPUsPerUser > 0 {
										tresList(w, tresItem{typ: "gres", name: "gpu", id: 1001, count: int64(q.MaxGPUsPerUser)})
									} else {
										tresList(w)
									}
								})
							})
							w.key("wall_clock")
							w.obj(func() {
								w.key("per")
								w.obj(func() {
									w.key("job")
									limit(w, int(q.MaxWall.Std()/time.Minute))
								})
							})
						})
					})
					w.key("name")
					w.str(q.Name)
					w.key("preempt")
					w.obj(func() {
						w.key("list")
						w.strs(q.Preempt)
						w.key("mode")
						w.arr(func() {
							switch strings.ToUpper(q.PreemptMode) {
							case "REQUEUE", "CHECKPOINT":
								w.str("REQUEUE")
							case "CANCEL":
								w.str("CANCEL")
							default:
								w.str("DISABLED")
							}
						})
					})
					w.key("priority")
					w.num(int64(q.Priority))
				})
			}
		})
	})
}

// clusterTres is the TRES table gpud counts: cpu, mem, node, billing and
// gres/gpu.
var clusterTres = []tresItem{{typ: "cpu", id: 1}, {typ: "mem", id: 2}, {typ: "energy", id: 3}, {typ: "node", id: 4}, {typ: "billing", id: 5}, {typ: "gres", name: "gpu", id: 1001}}

func dbTres(c *call) {
	c.reply(func(w *jw) {
		w.key("TRES")
		tresList(w, clusterTres...)
	})
}

func (c *call) writeCluster(w *jw) {
	w.obj(func() {
		w.key("controller")
		w.obj(func() {
			w.key("host")
			w.str(c.h.o.Hostname)
			w.key("port")
			w.int(0)
		})
		w.key("flags")
		w.arr(func() {})
		w.key("name")
		w.str(c.h.o.Cluster)
		w.key("nodes")
		w.str("")
		if c.v < 45 {
			w.key("select_plugin")
			w.str("select/cons_tres")
		}
		w.key("associations")
		w.obj(func() {
			w.key("root")
			assocShort(w, c.h.o.Cluster, "root", "", "")
		})
		w.key("rpc_version")
		w.int(0)
		w.key("tres")
		tresList(w, clusterTres...)
	})
}

// dbClusters is GET clusters/ and cluster/{name}: this one cluster.
func dbClusters(c *call) {
	if c.param != "" && c.param != c.h.o.Cluster {
		c.fail(http.StatusNotFound, errInvalidAccount, fmt.Sprintf("no cluster %q; this is cluster %s", clipText(c.param), c.h.o.Cluster), "cluster_name")
		return
	}
	c.reply(func(w *jw) {
		w.key("clusters")
		w.arr(func() { c.writeCluster(w) })
	})
}

// dbWCKeys is GET wckeys/ and wckey/{id}: gpud keeps a job's --wckey in
// its history but defines no wckey table.
func dbWCKeys(c *call) {
	if c.param != "" {
		c.fail(http.StatusNotFound, errInvalidWCKey, fmt.Sprintf("no wckey %q: gpud keeps a job's wckey with the job and has no wckey table", clipText(c.param)), "id")
		return
	}
	c.warn("gpud has no wckey table (a job's wckey is kept with the job): the list is empty", "")
	c.reply(func(w *jw) {
		w.key("wckeys")
		w.arr(func() {})
	})
}

// dbInstances: gpud has no cloud instance records.
func dbInstances(c *call) {
	c.warn("gpud keeps no cloud instance records: the list is empty", "")
	c.reply(func(w *jw) {
		w.key("instances")
		w.arr(func() {})
	})
}

// dbConfig is GET slurmdb config: everything of the above at once.
func dbConfig(c *call) {
	a, ok := c.associations()
	if !ok {
		return
	}
	names, of := userAccounts(a)
	c.reply(func(w *jw) {
		w.key("clusters")
		w.arr(func() { c.writeCluster(w) })
		w.key("tres")
		tresList(w, clusterTres...)
		w.key("accounts")
		w.arr(func() {
			for i := range a.Accounts {
				writeAccount(w, c.h.o.Cluster, &a.Accounts[i])
			}
		})
		w.key("users")
		w.arr(func() {
			for _, u := range names {
				w.obj(func() {
					w.key("name")
					w.str(u)
					w.key("default")
					w.obj(func() {
						w.key("account")
						w.str(of[u][0])
					})
				})
			}
		})
		w.key("qos")
		w.arr(func() {
			for _, q := range a.QOS {
				w.obj(func() {
					w.key("name")
					w.str(q.Name)
					w.key("priority")
					w.num(int64(q.Priority))
				})
			}
		})
		w.key("wckeys")
		w.arr(func() {})
		w.key("associations")
		w.arr(func() {
			for i := range a.Accounts {
				writeAssoc(w, c.h.o.Cluster, &a.Accounts[i], "", a.DefaultQOS, a.Accounts[i].Shares)
			}
		})
		if c.v < 45 {
			w.key("instances")
			w.arr(func() {})
		}
	})
}

// dbPing is GET slurmdb ping/: the accounting database answers when the
// job history does.
func dbPing(c *call) {
	start := c.h.o.Now()
	err := c.h.v1.Call(c.r, http.MethodGet, "/v1/accounting/jobs?limit=1", nil, nil)
	lat := c.h.o.Now().Sub(start)
	c.reply(func(w *jw) {
		w.key("pings")
		w.arr(func() {
			w.obj(func() {
				w.key("hostname")
				w.str(c.h.o.Hostname)
				w.key("responding")
				w.bool(err == nil)
				w.key("latency")
				w.int(lat.Microseconds())
				w.key("primary")
				w.bool(true)
				if c.v >= 45 {
					w.key("status")
					w.str(map[bool]string{true: "UP", false: "DOWN"}[err == nil])
				}
			})
		})
	})
}

// dbDiag is GET slurmdb diag/ (sdiag's slurmdbd part): gpud's accounting
// has no rollups or RPC statistics.
func dbDiag(c *call) {
	c.warn("gpud's accounting keeps no rollup or RPC statistics: the counts read 0", "")
	c.reply(func(w *jw) {
		w.key("statistics")
		w.obj(func() {
			w.key("time_start")
			w.int(c.h.o.Started.Unix())
			w.key("rollups")
			w.obj(func() {
				for _, p := range []string{"hourly", "daily", "monthly"} {
					w.key(p)
					w.obj(func() {
						w.key("count")
						w.int(0)
						w.key("last_run")
						w.int(0)
						w.key("duration")
						w.obj(func() {
							w.key("last")
							w.int(0)
							w.key("max")
							w.int(0)
							w.key("time")
							w.int(0)
						})
					})
				}
			})
			w.key("RPCs")
			w.arr(func() {})
			w.key("users")
			w.arr(func() {})
		})
	})
}
