package server_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// TestPrivacy ([privacy], Slurm's PrivateData): with jobs, usage, users
// and accounts private, alice sees only her own jobs (another's is "not
// found", wherever she asks: show, wait, cancel, update, a dependency),
// her own priority, fairshare row and live usage, the accounts she is in
// and no other user's name; carol, coordinator of bob's account, sees
// bob's; olga, an operator, sees everything. Without [privacy], alice
// sees bob's job in the queue.
func TestPrivacy(t *testing.T) {
	for _, private := range []bool{true, false} {
		t.Run("private="+strconv.FormatBool(private), func(t *testing.T) {
			s := secureServerWith(t, func(c *controller.Config) {
				c.Accounts = []controller.Account{{Name: "accta", Shares: 1, Users: []string{"alice"}},
					{Name: "acctb", Shares: 1, Users: []string{"bob"}, Coordinators: []string{"carol"}}}
				c.DefaultAccount = "accta"
				c.Privacy = controller.Privacy{Jobs: private, Usage: private, Users: private, Accounts: private}
			})
			ctx := ctxT(t)
			root := client(t, s.unix)
			as := func(user string, uid uint32, role string) *api.Client {
				return s.client(t, s.token(t, auth.Claims{User: user, UID: uid, GID: uid, Role: role}, time.Hour))
			}
			alice, bob, carol, olga := as("alice", 1001, ""), as("bob", 1002, ""), as("carol", 1003, ""), as("olga", 1004, auth.RoleOperator)
			if _, err := root.Register(ctx, inventory("n1", 2)); err != nil {
				t.Fatal(err)
			}
			submit := func(c *api.Client, account string, hold bool) spec.JobID {
				js := jobSpec("j")
				js.Account, js.Hold, js.Resources.GPUsPerNode = account, hold, 1
				r, err := c.Submit(ctx, api.SubmitRequest{Job: js})
				if err != nil {
					t.Fatal(err)
				}
				return r.ID
			}
			aRun, bRun := submit(alice, "accta", false), submit(bob, "acctb", false)
			aHeld, bHeld := submit(alice, "accta", true), submit(bob, "acctb", true)
			for _, id := range []spec.JobID{aRun, bRun} {
				waitAssignment(t, root, "n1", func(a api.Assignment) bool { return a.Job.ID == id })
			}
			now := time.Now().Truncate(time.Second)
			var evs []api.AllocEvent
			for i, id := range []spec.JobID{aRun, bRun} {
				j, err := root.Job(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, api.AllocEvent{Seq: uint64(i + 1), Node: "n1", AllocID: j.Alloc.ID, JobID: id, Kind: api.EventUsage, Time: spec.NewTime(now),
					Usage: &api.UsageSample{ID: "n1/" + j.Alloc.ID, Attempt: 1, Start: spec.NewTime(now.Add(-30 * time.Second)), End: spec.NewTime(now), GPUs: 1, GPUUtilAvg: 50}})
			}
			if _, err := root.Events(ctx, "n1", evs); err != nil {
				t.Fatal(err)
			}

			jobIDs := func(c *api.Client) []spec.JobID {
				js, err := c.Jobs(ctx, api.JobFilter{})
				if err != nil {
					t.Fatal(err)
				}
				var ids []spec.JobID
				for _, j := range js {
					ids = append(ids, j.ID)
				}
				return ids
			}
			all := []spec.JobID{aRun, bRun, aHeld, bHeld}
			if got := jobIDs(olga); !slices.Equal(got, all) {
				t.Errorf("olga (operator) lists %v; want every job %v", got, all)
			}
			if got, want := jobIDs(carol), []spec.JobID{bRun, bHeld}; private && !slices.Equal(got, want) {
				t.Errorf("carol (coordinator of acctb) lists %v; want acctb's %v", got, want)
			}
			got := jobIDs(alice)
			if !private {
				if !slices.Equal(got, all) {
					t.Errorf("without [privacy] alice lists %v; want every job %v", got, all)
				}
				return
			}
			if want := []spec.JobID{aRun, aHeld}; !slices.Equal(got, want) {
				t.Errorf("alice lists %v; want her own %v", got, want)
			}
			_, nosuch := alice.Job(ctx, 9999)
			_, err := alice.Job(ctx, bRun)
			wantStatus(t, "alice shows bob's job", err, 404, spec.ErrNotFound, "not found")
			if strings.ReplaceAll(err.Error(), strconv.Itoa(int(bRun)), "N") != strings.ReplaceAll(nosuch.Error(), "9999", "N") {
				t.Errorf("bob's job: %q; a job that does not exist: %q; want the same answer", err, nosuch)
			}
			_, err = alice.WaitJob(ctx, bRun)
			wantStatus(t, "alice waits for bob's job", err, 404, spec.ErrNotFound, "not found")
			_, err = alice.JobAction(ctx, bHeld, "cancel", api.JobActionRequest{})
			wantStatus(t, "alice cancels bob's job", err, 404, spec.ErrNotFound, "not found")
			comment := "x"
			_, err = alice.UpdateJob(ctx, spec.JobRef{ID: bHeld}, api.JobUpdateRequest{Comment: &comment})
			wantStatus(t, "alice updates bob's job", err, 404, spec.ErrNotFound, "not found")
			js := jobSpec("dep")
			js.Depend = "afterok:" + strconv.Itoa(int(bRun))
			_, err = alice.Submit(ctx, api.SubmitRequest{Job: js})
			if err == nil || strings.Contains(err.Error(), "bob") || !strings.Contains(err.Error(), "does not exist") && !strings.Contains(err.Error(), "not held") {
				t.Errorf("alice depends on bob's job: %v; want told it does not exist", err)
			}
			if r, err := alice.CancelJobs(ctx, api.CancelJobsRequest{Filter: api.JobFilter{Users: []string{"bob"}}}); err != nil || r.Skipped != 0 {
				t.Errorf("alice scancel -u bob: %+v %v; want nothing cancelled and nothing said of bob's jobs", r, err)
			}
			ps, err := alice.Priorities(ctx)
			if err != nil || len(ps) != 1 || ps[0].JobID != aHeld {
				t.Errorf("alice's sprio: %+v %v; want her pending job only", ps, err)
			}
			rows, err := alice.Fairshare(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.User != "" && r.User != "alice" || r.Account == "acctb" {
					t.Errorf("alice's sshare shows %+v; want only her own association and account", r)
				}
			}
			assoc, err := alice.Associations(ctx)
			if err != nil || len(assoc.Accounts) != 1 || assoc.Accounts[0].Name != "accta" || !slices.Equal(assoc.Accounts[0].Users, []string{"alice"}) {
				t.Errorf("alice's sacctmgr: %+v %v; want accta with alice only", assoc.Accounts, err)
			}
			if assoc, err := carol.Associations(ctx); err != nil || len(assoc.Accounts) != 1 || !slices.Equal(assoc.Accounts[0].Users, []string{"bob"}) {
				t.Errorf("carol's sacctmgr: %+v %v; want acctb, with its user bob (she coordinates it)", assoc.Accounts, err)
			}
			nodes, err := alice.Nodes(ctx)
			if err != nil || len(nodes) != 1 || !slices.Equal(nodes[0].Jobs, []spec.JobID{aRun}) {
				t.Errorf("alice's sinfo/scontrol show node: %+v %v; want n1 with her job only", nodes, err)
			}
			if n, err := olga.Nodes(ctx); err != nil || len(n[0].Jobs) != 2 {
				t.Errorf("olga's nodes: %+v %v; want both jobs", n, err)
			}
			live, err := alice.LatestUsage(ctx)
			if err != nil || len(live) != 1 || live[0].JobID != aRun {
				t.Errorf("alice's gpuq top: %+v %v; want her job's usage only", live, err)
			}
			if live, err := olga.LatestUsage(ctx); err != nil || len(live) != 2 {
				t.Errorf("olga's gpuq top: %+v %v; want both", live, err)
			}
			if _, err := bob.Job(ctx, bRun); err != nil {
				t.Errorf("bob shows his own job: %v", err)
			}
		})
	}
}
