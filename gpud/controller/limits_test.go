package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestAccountLimits drives the account limits through the controller:
// what is refused at submit (max wall, max submitted jobs, spent or too
// small budget) names the limit, and what is left to the scheduler (max
// GPUs) makes jobs wait with AccountLimit.
func TestAccountLimits(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Accounts = []Account{
			{Name: "lab", Shares: 1, MaxGPUs: 2, MaxSubmitJobs: 3, MaxWall: 2 * time.Hour, MaxGPUHours: 10, BudgetPeriod: 24 * time.Hour},
			{Name: "free", Shares: 1},
		}
	})
	ctx := context.Background()
	h.register("n1", 8)
	lab := func(gpus int, hours time.Duration) func(*spec.JobSpec) {
		return func(j *spec.JobSpec) {
			j.Account, j.Resources.GPUsPerNode, j.TimeLimit = "lab", gpus, spec.Duration(hours*time.Hour)
		}
	}
	submit := func(mod func(*spec.JobSpec)) error {
		js := spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp"}
		mod(&js)
		_, err := h.c.Submit(ctx, alice, js)
		return err
	}
	for _, tc := range []struct {
		name string
		mod  func(*spec.JobSpec)
		want string
	}{
		{"over max wall", lab(1, 3), "exceeds account lab's max_wall of 2:00:00"},
		{"no time limit counts as over max wall", lab(1, 0), "--time=UNLIMITED exceeds account lab's max_wall"},
		{"one job bigger than the whole budget", func(j *spec.JobSpec) { lab(8, 2)(j); j.Resources.GPUsPerNode = 6 }, "more than account lab's whole max_gpu_hours budget of 10"},
	} {
		if err := submit(tc.mod); !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want refused with %q", tc.name, err, tc.want)
		}
	}

	// Max GPUs: the second 2-GPU job waits with AccountLimit; the other
	// account is not affected.
	a := h.submit(alice, lab(2, 1))
	b := h.submit(alice, lab(2, 1))
	other := h.submit(alice, func(j *spec.JobSpec) { j.Account, j.Resources.GPUsPerNode = "free", 4 })
	if j := h.job(a); j.State != spec.StateRunning {
		t.Fatalf("first lab job %s/%s, want RUNNING", j.State, j.Reason)
	}
	if j := h.job(b); j.State != spec.StatePending || j.Reason != spec.ReasonAccountLimit {
		t.Errorf("second lab job %s/%s, want PENDING/%s", j.State, j.Reason, spec.ReasonAccountLimit)
	}
	if j := h.job(other); j.State != spec.StateRunning {
		t.Errorf("other account's job %s/%s, want RUNNING", j.State, j.Reason)
	}
	// Max submitted jobs: two are queued, an array of two more is one
	// too many.
	err := submit(func(j *spec.JobSpec) { lab(0, 1)(j); j.Array = "1-2" })
	if !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "max_submit_jobs is 3 (this submission adds 2)") {
		t.Errorf("array over max_submit_jobs: err = %v", err)
	}
	// Budget spent (accounting says so): refused, naming the limit.
	h.c.SetBudgetUsage(map[string]float64{"lab": 10.5})
	err = submit(lab(1, 1))
	if !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "used 10.5 GPU-hours of its max_gpu_hours budget of 10 in the last 24:00:00") {
		t.Errorf("over budget: err = %v", err)
	}
	// CPU-only jobs do not spend the GPU budget.
	if err := submit(lab(0, 1)); err != nil {
		t.Errorf("CPU-only job of an over-budget account: %v", err)
	}
}

// TestCoordinators: an account's coordinator may act on its jobs, not on
// other accounts' jobs.
func TestCoordinators(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Accounts = []Account{{Name: "lab", Shares: 1, Coordinators: []string{"bob"}}, {Name: "other", Shares: 1}}
	})
	ctx := context.Background()
	inLab := h.submit(alice, func(j *spec.JobSpec) { j.Account, j.Hold = "lab", true })
	elsewhere := h.submit(alice, func(j *spec.JobSpec) { j.Account, j.Hold = "other", true })
	if _, err := h.c.JobAction(ctx, bob, inLab, ActionCancel, ""); err != nil {
		t.Errorf("coordinator cancels a job of their account: %v", err)
	}
	if j := h.job(inLab); j.State != spec.StateCancelled || !strings.Contains(j.Reason, "bob") {
		t.Errorf("job after the coordinator's cancel: %s/%s", j.State, j.Reason)
	}
	if _, err := h.c.JobAction(ctx, bob, elsewhere, ActionCancel, ""); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Errorf("coordinator of lab cancels a job of account other: %v, want permission denied", err)
	}
}

func TestLimitChanges(t *testing.T) {
	old := &Config{Accounts: []Account{{Name: "lab", MaxGPUs: 4}, {Name: "gone"}}, QOS: []QOS{{Name: "normal"}}}
	new := &Config{Accounts: []Account{{Name: "lab", MaxGPUs: 8, Coordinators: []string{"bob"}}, {Name: "new"}}, QOS: []QOS{{Name: "normal", MaxJobsPerUser: 5}}}
	got := strings.Join(limitChanges(old, new), "; ")
	want := `account lab coordinators ""→bob; account lab max_gpus 4→8; account new added; qos normal max_jobs_per_user 0→5; account gone removed`
	if got != want {
		t.Errorf("limitChanges:\n got %s\nwant %s", got, want)
	}
}

// TestAccountAccess: an account with a users list may be charged only by
// them, its coordinators and root; an unknown account is an error naming
// the real ones.
func TestAccountAccess(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.AllowRootJobs = true
		c.Accounts = []Account{{Name: "lab", Shares: 1, Users: []string{"alice"}, Coordinators: []string{"carol"}}, {Name: "open", Shares: 1}}
	})
	carol := Caller{UID: 1002, GID: 1002, User: "carol", Known: true}
	for _, tc := range []struct {
		name    string
		who     Caller
		account string
		kind    error
		msg     string
	}{
		{"listed user", alice, "lab", nil, ""},
		{"coordinator", carol, "lab", nil, ""},
		{"root", root, "lab", nil, ""},
		{"anyone, open account", bob, "open", nil, ""},
		{"unlisted user", bob, "lab", spec.ErrPermissionDenied, "user bob may not charge account lab (its users: alice)"},
		{"unknown account", alice, "labb", spec.ErrInvalid, `account "labb" does not exist; choose one of: lab, open`},
	} {
		_, err := h.c.Submit(context.Background(), tc.who, spec.JobSpec{Name: "j", Script: "x", WorkDir: "/", Account: tc.account})
		switch {
		case tc.kind == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.kind != nil && (!errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("%s: err = %v; want %v with %q", tc.name, err, tc.kind, tc.msg)
		}
	}
}
