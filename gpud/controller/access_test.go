package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/spec"
)

// Issue 24, hole 3: [[partition]] allow_accounts was parsed and
// validated, and never reached the controller: alice (account accta) ran
// sbatch -p private to COMPLETED and scontrol update moved a job there.
// TestEveryAccessRuleOnEveryPath walks every key of gpud.toml that
// restricts who may run what (allow_*, deny_*, hidden, max_*), found by
// reflection over gpud/config, and proves each refuses on every path a
// job can enter by: sbatch, an array, an srun/salloc allocation, a job
// with a dependency, --test-only, scontrol update, a requeue, and the
// queue after a reload. The gpud.toml goes through config.Validate and
// FromConfig, as the daemon's does, so a key that does not reach the
// controller fails its row. A new restricting key without a row (or a
// line in notAccessRules saying why it is none) fails the test.

// Paths a job enters by.
const (
	pathSubmit  = "sbatch"
	pathArray   = "array"
	pathAlloc   = "srun/salloc allocation"
	pathDepend  = "dependency"
	pathTest    = "--test-only"
	pathUpdate  = "scontrol update"
	pathRequeue = "requeue"
	pathQueued  = "queued job after a reload"
)

var entryPaths = []string{pathSubmit, pathArray, pathAlloc, pathDepend, pathTest, pathUpdate, pathRequeue, pathQueued}

// notAccessRules are the restricting-looking keys that are not rules
// about jobs, and where they are tested.
var notAccessRules = map[string]string{
	"[scheduler] max_jobs_per_cycle": "bounds the starts of one scheduling cycle; no job is refused (TestMaxStartsPerCycle)",
	"[scheduler.priority] max_age":   "the pending time at which the age factor is 1; priority, not access",
	"[api] max_conns_per_user":       "a connection cap at the API edge (gpud/server TestPerUserCap... limits_test.go)",
	"[api] max_conns_per_ip":         "a connection cap at the API edge (gpud/server TestPerAddressCap)",
	"[api] max_conns":                "a connection cap at the API edge (gpud/server limits_test.go)",
}

var restrictingKey = regexp.MustCompile(`\] (allow_|deny_|max_|hidden$)`)

// configKeys lists every key of t (a gpud/config section) as
// "[section] key", "[[table]] key", walking nested sections.
func configKeys(t reflect.Type, section string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if f.Anonymous && tag == "" {
			out = append(out, configKeys(f.Type, section)...)
			continue
		}
		if tag == "" || tag == "-" {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeFor[config.Controller]().PkgPath() && ft.NumField() > 0:
			name := tag
			if section != "" {
				name = strings.Trim(section, "[]") + "." + tag
			}
			out = append(out, configKeys(ft, "["+name+"]")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), "[["+tag+"]]")...)
		default:
			out = append(out, section+" "+tag)
		}
	}
	return out
}

// accessRow is one restricting key: how to set it so alice's job breaks
// it, and what each path must then do.
type accessRow struct {
	key string
	// restrict sets the key in gpud.toml.
	restrict func(c *config.Controller)
	// job is alice's job that breaks the rule (on the base job below).
	job func(js *spec.JobSpec)
	// before, if set, runs before the job is submitted (alice's earlier
	// jobs, for the count limits).
	before func(t *testing.T, h *harness)
	// update turns a job that keeps the rule into one that breaks it:
	// the caller and the change.
	update func(id spec.JobID) (Caller, JobUpdate)
	// base makes the job the update starts from (one that keeps the
	// rule); nil: the default job.
	base func(js *spec.JobSpec)
	// refusal is what an entry must say; reason is the pending reason a
	// job that entered waits with instead (rules judged by the
	// scheduler). Per path overrides in refusalAt and reasonAt.
	refusal, reason      string
	refusalAt, reasonAt  map[string]string
	as                   *Caller
	skip                 map[string]string // path → why the rule cannot apply there
	partitionListChecked bool              // -p private,open must pick open
}

func TestEveryAccessRuleOnEveryPath(t *testing.T) {
	str := func(s string) *string { return &s }
	dur := func(d time.Duration) *time.Duration { return &d }
	gpus := func(n int) func(*spec.JobSpec) {
		return func(js *spec.JobSpec) { js.Resources.GPUsPerNode = n }
	}
	private := func(js *spec.JobSpec) { js.Partition = "private" }
	part := func(c *config.Controller) *config.Partition { return &c.Partitions[1] }
	acct := func(c *config.Controller) *config.Account { return &c.Accounts[0] }
	qos := func(c *config.Controller, name string) *config.QOS {
		for i := range c.QOS {
			if c.QOS[i].Name == name {
				return &c.QOS[i]
			}
		}
		t.Fatalf("no QOS %s", name)
		return nil
	}
	toPrivate := func(id spec.JobID) (Caller, JobUpdate) { return alice, JobUpdate{Partition: str("private")} }
	longer := func(id spec.JobID) (Caller, JobUpdate) { return root, JobUpdate{TimeLimit: dur(2 * time.Hour)} }
	toQOS := func(q string) func(spec.JobID) (Caller, JobUpdate) {
		return func(spec.JobID) (Caller, JobUpdate) { return root, JobUpdate{QOS: str(q)} }
	}
	oneEarlier := func(t *testing.T, h *harness) { h.submit(alice, func(js *spec.JobSpec) { js.Hold = true }) }
	oneRunning := func(t *testing.T, h *harness) {
		id := h.submit(alice, func(js *spec.JobSpec) { js.Resources.GPUsPerNode = 1 })
		if j := h.job(id); j.State != spec.StateRunning {
			t.Fatalf("alice's first job is %s, want RUNNING", j.State)
		}
	}
	inQOS := func(q string, more func(*spec.JobSpec)) func(*spec.JobSpec) {
		return func(js *spec.JobSpec) {
			js.QOS = q
			if more != nil {
				more(js)
			}
		}
	}
	// bigEnv makes the job's payload about n bytes, in its environment
	// (srun and salloc send no script of the user's).
	bigEnv := func(n int) func(*spec.JobSpec) {
		return func(js *spec.JobSpec) {
			for i, left := 0, n; left > 0; i++ {
				k := min(left, 60<<10)
				js.Env = append(js.Env, fmt.Sprintf("V%d=%s", i, strings.Repeat("x", k)))
				left -= k
			}
		}
	}
	counted := "a count limit judges what a submission adds; a requeued or queued job was counted when it was submitted, as Slurm's MaxSubmitJobs"
	noChange := "scontrol update cannot change what this limit counts (account, resources, number of jobs)"
	running := "a running-job limit: the requeued job is the running one, and leaves its place when it stops"
	rows := []accessRow{
		{key: "[[partition]] allow_accounts", restrict: func(c *config.Controller) { part(c).AllowAccounts = []string{"acctb"} },
			job: private, update: toPrivate, refusal: "account accta may not use partition private (its allow_accounts: acctb)",
			reason: spec.ReasonAccountNotAllowed, partitionListChecked: true},
		{key: "[[partition]] deny_accounts", restrict: func(c *config.Controller) { part(c).DenyAccounts = []string{"accta"} },
			job: private, update: toPrivate, refusal: "account accta may not use partition private (it is in the partition's deny_accounts)",
			reason: spec.ReasonAccountNotAllowed, partitionListChecked: true},
		{key: "[[partition]] allow_groups", restrict: func(c *config.Controller) { part(c).AllowGroups = []string{"gpuusers"} },
			job: private, update: toPrivate, refusal: "user alice may not use partition private: only members of gpuusers may",
			reason: spec.ReasonAccountNotAllowed, partitionListChecked: true},
		{key: "[[partition]] allow_qos", restrict: func(c *config.Controller) { part(c).AllowQOS = []string{"high"} },
			job: private, update: toPrivate, refusal: "QOS normal may not be used in partition private (its allow_qos: high)",
			reason: spec.ReasonQOSNotAllowed, partitionListChecked: true},
		{key: "[[partition]] deny_qos", restrict: func(c *config.Controller) { part(c).DenyQOS = []string{"normal"} },
			job: private, update: toPrivate, refusal: "QOS normal may not be used in partition private (it is in the partition's deny_qos)",
			reason: spec.ReasonQOSNotAllowed, partitionListChecked: true},
		{key: "[[partition]] hidden", restrict: func(c *config.Controller) {
			// Only bob may use private (acctb is his): alice is not told
			// it exists.
			part(c).Hidden, part(c).AllowAccounts = true, []string{"acctb"}
			c.Accounts[1].Users = []string{"bob"}
		}, job: private, update: toPrivate, refusal: `partition "private" does not exist; choose one of: open`,
			refusalAt: map[string]string{pathRequeue: "account accta may not use partition private"},
			reason:    spec.ReasonAccountNotAllowed, partitionListChecked: true},
		{key: "[[partition]] max_time", restrict: func(c *config.Controller) { part(c).MaxTime, part(c).DefaultTime = "1h", "1h" },
			job: func(js *spec.JobSpec) { private(js); js.TimeLimit = spec.Duration(2 * time.Hour) },
			update: func(spec.JobID) (Caller, JobUpdate) {
				return root, JobUpdate{Partition: str("private"), TimeLimit: dur(2 * time.Hour)}
			},
			refusal: "--time=2:00:00 exceeds partition private's limit of 1:00:00", reason: spec.ReasonQOSLimit, partitionListChecked: true},
		{key: "[[qos]] max_wall", restrict: func(c *config.Controller) { qos(c, "normal").MaxWall = "1h" },
			job: func(js *spec.JobSpec) { js.TimeLimit = spec.Duration(2 * time.Hour) }, update: longer, reason: spec.ReasonQOSLimit},
		{key: "[[qos]] max_gpus_per_user", restrict: func(c *config.Controller) { qos(c, "normal").MaxGPUsPerUser = 1 },
			job: gpus(2), base: inQOS("low", gpus(2)), update: toQOS("normal"), reason: spec.ReasonQOSLimit},
		{key: "[[qos]] max_jobs_per_user", restrict: func(c *config.Controller) { qos(c, "normal").MaxJobsPerUser = 1 },
			before: oneRunning, job: gpus(1), base: inQOS("low", gpus(1)), update: toQOS("normal"), reason: spec.ReasonQOSLimit,
			skip: map[string]string{pathRequeue: running}},
		{key: "[[qos]] max_submit_jobs_per_user", restrict: func(c *config.Controller) { qos(c, "normal").MaxSubmitJobsPerUser = 1 },
			before: oneEarlier, base: inQOS("low", nil), update: toQOS("normal"), refusal: "max_submit_jobs_per_user is 1",
			skip: map[string]string{pathRequeue: counted, pathQueued: counted}},
		{key: "[[account]] allow_qos", restrict: func(c *config.Controller) { acct(c).AllowQOS = []string{"low", "high"} },
			base: inQOS("low", nil), update: toQOS("normal"), refusal: "account accta may not use QOS normal (its allow_qos: low, high)",
			reason: spec.ReasonInvalidQOS},
		{key: "[[account]] max_gpus", restrict: func(c *config.Controller) { acct(c).MaxGPUs = 1 },
			job: gpus(2), reason: spec.ReasonAccountLimit, skip: map[string]string{pathUpdate: noChange}},
		{key: "[[account]] max_jobs", restrict: func(c *config.Controller) { acct(c).MaxJobs = 1 },
			before: oneRunning, job: gpus(1), reason: spec.ReasonAccountLimit, skip: map[string]string{pathUpdate: noChange, pathRequeue: running}},
		{key: "[[account]] max_submit_jobs", restrict: func(c *config.Controller) { acct(c).MaxSubmitJobs = 1 },
			before: oneEarlier, refusal: "account accta has 1 jobs pending or running and its max_submit_jobs is 1",
			skip: map[string]string{pathUpdate: noChange, pathRequeue: counted, pathQueued: counted}},
		{key: "[[account]] max_submit_jobs_per_user", restrict: func(c *config.Controller) { acct(c).MaxSubmitJobsPerUser = 1 },
			before: oneEarlier, refusal: "account accta's max_submit_jobs_per_user is 1",
			skip: map[string]string{pathUpdate: noChange, pathRequeue: counted, pathQueued: counted}},
		{key: "[[account]] max_wall", restrict: func(c *config.Controller) { acct(c).MaxWall = "1h" },
			job: func(js *spec.JobSpec) { js.TimeLimit = spec.Duration(2 * time.Hour) }, update: longer,
			refusal: "exceeds account accta's max_wall of 1:00:00", reason: spec.ReasonAccountLimit},
		{key: "[[account]] max_gpu_hours", restrict: func(c *config.Controller) { acct(c).MaxGPUHours = 1 },
			job: gpus(4), base: gpus(1), update: longer, refusal: "more than account accta's whole max_gpu_hours budget of 1",
			reasonAt: map[string]string{pathQueued: spec.ReasonAccountLimit},
			skip:     map[string]string{pathRequeue: "the budget counts GPU-hours used, which a requeue does not add; a requeued job that would overrun what is left waits (AccountLimit), as the queued path shows"}},
		{key: "[limits] max_submit_size", restrict: func(c *config.Controller) { c.Limits.MaxSubmitSize = "1M" },
			job: bigEnv(1100 << 10), base: bigEnv(1000 << 10),
			update: func(spec.JobID) (Caller, JobUpdate) {
				return alice, JobUpdate{Comment: str(strings.Repeat("c", 60<<10))}
			},
			refusal: "max_submit_size of 1 MiB", skip: map[string]string{pathRequeue: counted, pathQueued: counted}},
		{key: "[limits] max_submit_jobs_per_user", restrict: func(c *config.Controller) { c.Limits.MaxSubmitJobsPerUser = 1 },
			before: oneEarlier, refusal: "[limits] max_submit_jobs_per_user is 1",
			skip: map[string]string{pathUpdate: "an update adds no job", pathRequeue: counted, pathQueued: counted}},
		{key: "[limits] max_submit_size_per_user", restrict: func(c *config.Controller) { c.Limits.MaxSubmitSizePerUser = "1M" },
			before: func(t *testing.T, h *harness) {
				h.submit(alice, func(js *spec.JobSpec) { js.Hold = true; bigEnv(980 << 10)(js) })
			},
			job: bigEnv(200 << 10),
			update: func(spec.JobID) (Caller, JobUpdate) {
				return alice, JobUpdate{Comment: str(strings.Repeat("c", 60<<10))}
			},
			refusal: "max_submit_size_per_user is 1 MiB", skip: map[string]string{pathRequeue: counted, pathQueued: counted}},
		{key: "[controller] allow_root_jobs", restrict: func(c *config.Controller) { c.Controller.AllowRootJobs = false },
			as: &root, refusal: "jobs may not run as root",
			skip: map[string]string{pathUpdate: "an update cannot change whose job it is",
				pathRequeue: "allow_root_jobs judges submissions; root's running and queued jobs are root's to cancel",
				pathQueued:  "allow_root_jobs judges submissions; root's running and queued jobs are root's to cancel"}},
	}

	// Every restricting key has a row or a reason.
	have := map[string]bool{}
	for _, r := range rows {
		have[r.key] = true
	}
	for _, k := range configKeys(reflect.TypeFor[config.Controller](), "") {
		if !restrictingKey.MatchString(k) {
			continue
		}
		if _, ok := notAccessRules[k]; !have[k] && !ok {
			t.Errorf("gpud.toml key %s restricts who may run what but has no row here: add one proving it refuses on %s (or a line in notAccessRules saying why it is no access rule)",
				k, strings.Join(entryPaths, ", "))
		}
		delete(have, k)
	}
	for k := range have {
		t.Errorf("row %s names no gpud.toml key", k)
	}

	for _, r := range rows {
		for _, path := range entryPaths {
			t.Run(r.key+"/"+path, func(t *testing.T) {
				if why, ok := r.skip[path]; ok {
					t.Skipf("does not apply: %s", why)
				}
				runAccessPath(t, r, path)
			})
		}
	}
}

// accessConfig is the site the rows restrict: partitions open (default)
// and private, accounts accta (alice's default) and acctb, the default
// QOS list, one node of 4 GPUs.
func accessConfig(t *testing.T, restrict func(*config.Controller)) Config {
	t.Helper()
	c := config.Defaults()
	c.Controller.StateDir = "/var/lib/gpud"
	c.Partitions = []config.Partition{
		{Name: "open", Nodes: []string{config.AllNodes}, Default: true, DefaultTime: "30m", MaxTime: config.Unlimited, State: config.PartitionUp},
		{Name: "private", Nodes: []string{config.AllNodes}, DefaultTime: "30m", MaxTime: config.Unlimited, State: config.PartitionUp},
	}
	c.Accounts = []config.Account{{Name: "accta", Shares: 1}, {Name: "acctb", Shares: 1}}
	c.DefaultAccount = "accta"
	if restrict != nil {
		restrict(&c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("gpud.toml of the row: %v", err)
	}
	cc, err := FromConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	cc.AllowRootJobs = c.Controller.AllowRootJobs
	return cc
}

// alice is in no group but her own; bob is in gpuusers.
func init() {
	alice.Groups = []string{"alice"}
	bob.Groups = []string{"bob", "gpuusers"}
}

func runAccessPath(t *testing.T, r accessRow, path string) {
	ctx := context.Background()
	restricted := accessConfig(t, r.restrict)
	open := accessConfig(t, nil)
	start := restricted
	if path == pathRequeue || path == pathQueued || path == pathDepend {
		start = open // the rule comes with a reload, or after the dependency ran
	}
	h := newHarness(t, newFakeStore(), func(c *Config) { *c = start })
	h.register("n1", 4)
	who := alice
	if r.as != nil {
		who = *r.as
	}
	js := spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Requeue: true}
	if r.job != nil {
		r.job(&js)
	}
	refusal, reason := r.refusal, r.reason
	if s, ok := r.refusalAt[path]; ok {
		refusal = s
	}
	if s, ok := r.reasonAt[path]; ok {
		reason, refusal = s, ""
	}
	// Entry either fails with refusal, or the job enters and must wait
	// with reason.
	check := func(what string, id spec.JobID, err error) {
		t.Helper()
		switch {
		case refusal != "":
			if err == nil || !strings.Contains(err.Error(), refusal) {
				t.Fatalf("%s: err = %v; want refused saying %q", what, err, refusal)
			}
			if !errors.Is(err, spec.ErrRefused) && !errors.Is(err, spec.ErrPermissionDenied) && !errors.Is(err, spec.ErrInvalid) {
				t.Errorf("%s: %v is of no refusal kind", what, err)
			}
		case err != nil:
			t.Fatalf("%s: %v; want the job to enter and wait with %s", what, err, reason)
		default:
			if j := h.job(id); j.State != spec.StatePending || j.Reason != reason {
				t.Fatalf("%s: job %d is %s (%s); want PENDING with reason %s", what, id, j.State, j.Reason, reason)
			}
		}
	}
	apply := func(cfg Config) {
		t.Helper()
		if _, err := h.c.ApplyConfig(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if r.before != nil && path != pathRequeue && path != pathDepend {
		r.before(t, h)
	}
	switch path {
	case pathSubmit, pathArray, pathAlloc:
		switch path {
		case pathArray:
			js.Array = "0-1"
		case pathAlloc:
			// As srun and salloc outside a job make it (gpuq/srun).
			js.Interactive, js.Requeue = true, false
			js.Script = "#!/bin/sh\n# interactive allocation (salloc): steps come from outside; the nodes hold\n"
		}
		ids, err := h.c.SubmitAll(ctx, who, js)
		var id spec.JobID
		if err == nil {
			id = ids[len(ids)-1]
		}
		check(path, id, err)
		if r.partitionListChecked && refusal != "" {
			// sbatch -p private,open: never private.
			js.Partition, js.Array, js.Interactive, js.Script = "private,open", "", false, "#!/bin/sh\ntrue\n"
			id, err := h.c.Submit(ctx, who, js)
			if err != nil && !strings.Contains(err.Error(), "max_time") {
				t.Fatalf("-p private,open: %v; want the job in open", err)
			}
			if err == nil {
				if j := h.job(id); j.Partition != "open" || slices.Contains(j.Partitions, "private") {
					t.Errorf("-p private,open: job in %s (choices %v); want open, never private", j.Partition, j.Partitions)
				}
			}
		}
	case pathTest:
		_, err := h.c.TestSubmit(ctx, who, js)
		if reason != "" && refusal == "" {
			if err != nil {
				t.Fatalf("--test-only: %v; want accepted (the job would wait with %s)", err, reason)
			}
			return
		}
		check(path, 0, err)
	case pathDepend:
		first := h.submit(who, func(js *spec.JobSpec) { js.Resources.GPUsPerNode = 1 })
		j := h.job(first)
		if j.State != spec.StateRunning {
			t.Fatalf("the job depended on is %s", j.State)
		}
		h.exit("n1", j, spec.StateCompleted, 0)
		apply(restricted)
		if r.before != nil {
			r.before(t, h)
		}
		js.Depend = fmt.Sprintf("afterok:%d", first)
		id, err := h.c.Submit(ctx, who, js)
		check(path, id, err)
	case pathUpdate:
		if r.update == nil {
			t.Fatalf("row %s has no update and no reason to skip it", r.key)
		}
		// A job that keeps the rule (the default job, as r.base makes
		// it), held so that it stays pending; the update makes it break
		// the rule.
		base := spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Hold: true}
		if r.base != nil {
			r.base(&base)
		}
		id, err := h.c.Submit(ctx, who, base)
		if err != nil {
			t.Fatalf("the job to update: %v", err)
		}
		as, u := r.update(id)
		_, err = h.c.UpdateJob(ctx, as, spec.JobRef{ID: id}, u)
		if err == nil && refusal == "" {
			if _, err := h.c.JobAction(ctx, root, id, ActionRelease, ""); err != nil {
				t.Fatal(err)
			}
		}
		check(path, id, err)
	case pathRequeue:
		if r.before != nil {
			r.before(t, h)
		}
		js.Partition = strings.ReplaceAll(js.Partition, "private", "private")
		id, err := h.c.Submit(ctx, who, js)
		if err != nil {
			t.Fatalf("submit before the reload: %v", err)
		}
		j := h.job(id)
		if j.State != spec.StateRunning {
			t.Fatalf("job before the reload is %s (%s), want RUNNING", j.State, j.Reason)
		}
		apply(restricted)
		_, err = h.c.JobAction(ctx, who, id, ActionRequeue, "")
		if refusal != "" {
			check(path, id, err)
			return
		}
		if err != nil {
			t.Fatalf("requeue: %v; want requeued, then waiting with %s", err, reason)
		}
		h.exit("n1", h.job(id), spec.StateCancelled, 0)
		check(path, id, nil)
	case pathQueued:
		js.Hold = true
		id, err := h.c.Submit(ctx, who, js)
		if err != nil {
			t.Fatalf("submit before the reload: %v", err)
		}
		apply(restricted)
		if _, err := h.c.JobAction(ctx, who, id, ActionRelease, ""); err != nil {
			t.Fatal(err)
		}
		if refusal != "" && reason == "" {
			t.Fatalf("row %s refuses at entry but names no pending reason for a queued job", r.key)
		}
		refusal = ""
		check(path, id, nil)
	}
}

func mustList(t *testing.T, h *harness) []spec.Job {
	t.Helper()
	h.settle()
	views, err := h.c.ListJobs(context.Background(), JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []spec.Job
	for _, v := range views {
		out = append(out, v.Job())
	}
	return out
}

// A hidden partition is listed only to root (operators) and to users its
// rules let use it; naming it is answered as naming no partition.
func TestHiddenPartitionIsListedOnlyToWhoMayUseIt(t *testing.T) {
	cfg := accessConfig(t, func(c *config.Controller) {
		c.Partitions[1].Hidden = true
		c.Partitions[1].AllowGroups = []string{"gpuusers"}
	})
	h := newHarness(t, newFakeStore(), func(c *Config) { *c = cfg })
	ctx := context.Background()
	for _, tc := range []struct {
		who  Caller
		want []string
	}{{alice, []string{"open"}}, {bob, []string{"open", "private"}}, {root, []string{"open", "private"}}} {
		ps, err := h.c.Partitions(ctx, tc.who)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s sees partitions %v; want %v", tc.who.User, got, tc.want)
		}
	}
	_, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: "#!/bin/sh\n", WorkDir: "/tmp", Partition: "nosuch"})
	_, err2 := h.c.Submit(ctx, alice, spec.JobSpec{Script: "#!/bin/sh\n", WorkDir: "/tmp", Partition: "private"})
	if err == nil || err2 == nil || strings.ReplaceAll(err.Error(), "nosuch", "X") != strings.ReplaceAll(err2.Error(), "private", "X") {
		t.Errorf("alice names a hidden partition: %v; want the same answer as for one that does not exist (%v)", err2, err)
	}
	if _, err := h.c.Submit(ctx, bob, spec.JobSpec{Script: "#!/bin/sh\n", WorkDir: "/tmp", Partition: "private"}); err != nil {
		t.Errorf("bob, a member of gpuusers, submits to private: %v", err)
	}
}
