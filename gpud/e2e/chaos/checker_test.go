package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// callBudget is the longest a CLI call may take: the client's failover
// budget (api.DefaultFailoverTimeout, docs/ha.md) and a second for the
// process to start and print.
const callBudget = api.DefaultFailoverTimeout + time.Second

// verdict is what the checker found: every problem, and the figures of
// the fault table.
type verdict struct {
	problems []string
	// by job: what it was asked and what became of it
	records map[string][]api.AcctJob
	// bad are the jobs with a problem (the fault table counts them
	// against each fault they ran through).
	bad []api.AcctJob
}

func (v *verdict) fail(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// accounting reads every job of the user from accounting, with steps and
// attempts, once every job the workload acknowledged is there (the
// leader records ended jobs shortly after they end).
func (c *cluster) accounting(want []spec.JobID) []api.AcctJob {
	var jobs []api.AcctJob
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		jobs, err = c.admin.AcctJobs(ctx, api.AcctFilter{Users: []string{c.user.Name}, Steps: true, AttemptHistory: true})
		cancel()
		have := map[spec.JobID]bool{}
		for _, j := range jobs {
			if j.State.Terminal() {
				have[j.ID] = true
			}
		}
		missing := 0
		for _, id := range want {
			if !have[id] {
				missing++
			}
		}
		if err == nil && missing == 0 {
			return jobs
		}
		if time.Now().After(deadline) {
			c.t.Logf("accounting: %d acknowledged jobs not recorded as ended after 2 minutes (last error: %v)", missing, err)
			return jobs
		}
		time.Sleep(2 * time.Second)
	}
}

// check reads accounting, the jobs' output files and the clients' log and
// fails on: an acknowledged submission that is not exactly one job; a
// job requeued with no node fault to explain it (a controller fault must
// never cost a running job); a step that lost output or exit status; a
// job COMPLETED whose steps did not run on every node; a client call over
// the budget.
func (x *chaos) check() *verdict {
	c, w := x.c, x.w
	v := &verdict{records: map[string][]api.AcctJob{}}
	calls := w.snapshot()
	var acked []spec.JobID
	for _, cl := range calls {
		if cl.acked() {
			acked = append(acked, cl.JobID)
		}
	}
	for _, j := range c.accounting(acked) {
		v.records[j.Name] = append(v.records[j.Name], j)
	}

	// Exactly once.
	for _, cl := range calls {
		if cl.Kind == "squeue" {
			continue
		}
		recs := v.records[cl.Name]
		switch {
		case cl.acked() && (len(recs) != 1 || recs[0].ID != cl.JobID):
			var ids []spec.JobID
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			v.fail("submission %s acknowledged as job %d is %d jobs in accounting %v", cl.Name, cl.JobID, len(recs), ids)
		case !cl.acked() && len(recs) > 1:
			v.fail("submission %s (not acknowledged: exit %d, %s) made %d jobs", cl.Name, cl.Code, lastLine(cl.Stderr), len(recs))
		}
	}

	// No requeue a node fault does not explain.
	for name, recs := range v.records {
		for _, r := range recs {
			for _, a := range r.AttemptHistory {
				if a.State != spec.StateRequeued {
					continue
				}
				if f := x.nodeFaultOn(a.Nodes, a.EndTime.Time); f == nil {
					v.fail("job %d (%s) attempt %d on %s was requeued at %s (%s) with no node fault on its nodes: a controller fault cost a running job",
						r.ID, name, a.Attempt, strings.Join(a.Nodes, ","), a.EndTime.Format("15:04:05.000"), a.Reason)
				}
			}
		}
	}

	// Steps: output, exit status, every node.
	w.mu.Lock()
	plans := maps(w.plans)
	w.mu.Unlock()
	for _, cl := range calls {
		if cl.Kind != "sbatch" || !cl.acked() {
			continue
		}
		p, recs := plans[cl.Name], v.records[cl.Name]
		if len(recs) != 1 {
			continue // reported above
		}
		x.checkJob(v, p, recs[0])
	}

	// Budget.
	for _, cl := range calls {
		if cl.Dur > callBudget {
			v.fail("%s %s took %.1fs (budget %s): exit %d, %s", cl.Kind, cl.Name, cl.Dur.Seconds(), callBudget, cl.Code, lastLine(cl.Stderr))
		}
	}
	return v
}

// during names the faults under way while r ran (any attempt), for
// messages: which fault a problem comes from.
func (x *chaos) during(r api.AcctJob) string {
	var names []string
	for _, f := range x.faults {
		if f.touched(r) {
			names = append(names, f.Name+" ("+f.Target+")")
		}
	}
	var att []string
	for _, a := range r.AttemptHistory {
		att = append(att, fmt.Sprintf("attempt %d %s on %s %s-%s %q", a.Attempt, a.State, strings.Join(a.Nodes, ","),
			a.StartTime.Format("15:04:05"), a.EndTime.Format("15:04:05"), a.Reason))
	}
	if len(names) == 0 {
		names = []string{"no fault"}
	}
	return fmt.Sprintf("[during %s; %s]", strings.Join(names, ", "), strings.Join(att, "; "))
}

// touched reports whether an attempt of r ran while f was under way
// (until the cluster was whole again).
func (f *fault) touched(r api.AcctJob) bool {
	end := f.Settled
	if end.IsZero() {
		end = f.End
	}
	return slices.ContainsFunc(r.AttemptHistory, func(a api.AcctAttempt) bool {
		return a.StartTime.Before(end) && (a.EndTime.IsZero() || a.EndTime.After(f.Start))
	})
}

// checkJob checks one of the stream's jobs as it ended.
func (x *chaos) checkJob(v *verdict, p plan, r api.AcctJob) {
	n := len(v.problems)
	defer func() {
		if len(v.problems) > n {
			v.bad = append(v.bad, r)
			v.problems[len(v.problems)-1] += " " + x.during(r)
			x.keepOutput(r.ID)
		}
	}()
	if r.State != spec.StateCompleted {
		if f := x.lossOn(r); f != nil {
			return // a cut longer than node_timeout ended it: allowed
		}
		v.fail("job %d (%s) ended %s (%s); want COMPLETED", r.ID, p.name, r.State, r.Reason)
		return
	}
	out, err := os.ReadFile(filepath.Join(x.c.work, fmt.Sprintf("slurm-%d.out", r.ID)))
	if err != nil {
		v.fail("job %d (%s): its output: %v", r.ID, p.name, err)
		return
	}
	text := string(out)
	if !p.gang {
		if !strings.Contains(text, "done\n") {
			v.fail("job %d (%s) COMPLETED without its last line:\n%s", r.ID, p.name, text)
		}
		return
	}
	lost := 0
	for task := range 2 {
		for i := 1; i <= p.lines; i++ {
			if !strings.Contains(text, fmt.Sprintf("%d: line %d of task %d\n", task, i, task)) {
				lost++
			}
		}
	}
	if lost > 0 {
		v.fail("job %d (%s): %d of %d step output lines lost", r.ID, p.name, lost, 2*p.lines)
	}
	if want := fmt.Sprintf("srun rc=%d\n", p.code); !strings.Contains(text, want) {
		v.fail("job %d (%s): srun's exit status not delivered (want %q in its output)", r.ID, p.name, strings.TrimSpace(want))
	}
	i := slices.IndexFunc(r.Steps, func(s api.AcctStep) bool { return s.ID == "0" })
	if i < 0 {
		v.fail("job %d (%s) COMPLETED with no step 0 in accounting", r.ID, p.name)
		return
	}
	s := r.Steps[i]
	wantState := spec.StateCompleted
	if p.code != 0 {
		wantState = spec.StateFailed
	}
	if s.ExitCode != p.code || s.State != wantState {
		v.fail("job %d (%s) step 0 ended %s exit %d; want %s exit %d", r.ID, p.name, s.State, s.ExitCode, wantState, p.code)
	}
	nodes := slices.Compact(slices.Sorted(slices.Values(s.Nodes)))
	if len(nodes) != 2 {
		v.fail("job %d (%s) COMPLETED but its step ran on %v, not on both of its nodes %v", r.ID, p.name, s.Nodes, r.Nodes)
	}
}

// keepOutput copies job id's output into the report directory, and logs
// its last lines (a CI run keeps no report directory: what srun said is
// how a failure there is understood).
func (x *chaos) keepOutput(id spec.JobID) {
	name := fmt.Sprintf("slurm-%d.out", id)
	b, err := os.ReadFile(filepath.Join(x.c.work, name))
	if err != nil {
		x.c.t.Logf("job %d's output: %v", id, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	x.c.t.Logf("job %d's output, last %d of %d lines:\n%s", id, min(len(lines), 12), len(lines), strings.Join(lines[max(len(lines)-12, 0):], "\n"))
	if dir := os.Getenv("GPUD_CHAOS_REPORT"); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
}

// lossOn is a fault that may end runs (MayLose) on one of the nodes of
// r's last attempt while it ran, or nil.
func (x *chaos) lossOn(r api.AcctJob) *fault {
	if len(r.AttemptHistory) == 0 {
		return nil
	}
	a := r.AttemptHistory[len(r.AttemptHistory)-1]
	for _, f := range x.faults {
		if !f.MayLose || !slices.ContainsFunc(f.Nodes, func(n string) bool { return slices.Contains(a.Nodes, n) }) {
			continue
		}
		if a.StartTime.Before(f.End) && (a.EndTime.IsZero() || a.EndTime.After(f.Start)) {
			return f
		}
	}
	return nil
}

// nodeFaultOn is a node fault on one of nodes that was under way at t (or
// whose effects were: until a minute after the cluster settled), or nil.
func (x *chaos) nodeFaultOn(nodes []string, t time.Time) *fault {
	for _, f := range x.faults {
		if f.Controller || len(f.Nodes) == 0 {
			continue
		}
		hit := false
		for _, n := range f.Nodes {
			hit = hit || slices.Contains(nodes, n)
		}
		end := f.Settled
		if end.IsZero() {
			end = time.Now()
		}
		if hit && !t.Before(f.Start) && t.Before(end.Add(time.Minute)) {
			return f
		}
	}
	return nil
}

func maps(m map[string]plan) map[string]plan {
	out := make(map[string]plan, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// table is the fault table of docs/ha.md: for each fault, what users saw
// and for how long, and what was lost.
func (x *chaos) table(v *verdict) string {
	calls := x.w.snapshot()
	var b strings.Builder
	b.WriteString("| fault | first acknowledgement after it | squeue during it (max, failed/all) | slowest sbatch during it | cluster whole again | jobs requeued | lost |\n|---|---|---|---|---|---|---|\n")
	for _, f := range x.faults {
		end := f.Settled
		if end.IsZero() {
			end = f.End
		}
		var sqMax, sbMax time.Duration
		sqFail, sqAll := 0, 0
		for _, cl := range calls {
			if cl.Start.Before(f.Start) || cl.Start.After(end) {
				continue
			}
			switch cl.Kind {
			case "squeue":
				sqAll++
				sqMax = max(sqMax, cl.Dur)
				if cl.Code != 0 {
					sqFail++
				}
			default:
				sbMax = max(sbMax, cl.Dur)
			}
		}
		requeued := 0
		for _, recs := range v.records {
			for _, r := range recs {
				for _, a := range r.AttemptHistory {
					if a.State == spec.StateRequeued && !a.EndTime.Before(f.Start) && a.EndTime.Before(end) {
						requeued++
					}
				}
			}
		}
		ack := "-"
		if f.FirstAck > 0 {
			ack = fmt.Sprintf("%.1f s", f.FirstAck.Seconds())
		}
		lost := "nothing"
		if n := len(slices.DeleteFunc(slices.Clone(v.bad), func(r api.AcctJob) bool { return !f.touched(r) })); n > 0 {
			lost = fmt.Sprintf("%d jobs with problems ran through it", n)
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s, %d/%d | %.1f s | %.0f s | %d | %s |\n", f.Name, ack, sqMax.Seconds(), sqFail, sqAll,
			sbMax.Seconds(), end.Sub(f.Start).Seconds(), requeued, lost)
	}
	return b.String()
}

// report writes the clients' log, the faults and the verdict to dir.
func (x *chaos) report(dir string, v *verdict) {
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		x.c.t.Logf("report: %v", err)
		return
	}
	var b strings.Builder
	for _, cl := range x.w.snapshot() {
		fmt.Fprintf(&b, "%s %s %s %.3fs exit=%d job=%d %s\n", cl.Start.Format("15:04:05.000"), cl.Kind, cl.Name, cl.Dur.Seconds(), cl.Code, cl.JobID, lastLine(cl.Stderr))
	}
	_ = os.WriteFile(filepath.Join(dir, "calls.log"), []byte(b.String()), 0o644)
	b.Reset()
	for _, f := range x.faults {
		fmt.Fprintf(&b, "%s target=%s start=%s end=%s settled=%s first_ack=%s notes=%q\n", f.Name, f.Target,
			f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Settled.Format("15:04:05.000"), f.FirstAck, f.Notes)
	}
	names := make([]string, 0, len(v.records))
	for n := range v.records {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, r := range v.records[n] {
			fmt.Fprintf(&b, "job %d %s %s attempts=%d reason=%q\n", r.ID, n, r.State, len(r.AttemptHistory), r.Reason)
		}
	}
	b.WriteString("\n" + x.table(v) + "\nproblems:\n" + strings.Join(v.problems, "\n") + "\n")
	_ = os.WriteFile(filepath.Join(dir, "faults.log"), []byte(b.String()), 0o644)
}
