package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestUpdateJob: scontrol update's policy. The owner may lower a time
// limit, move a pending job to a partition that admits it and raise its
// nice; raising a limit, changing QOS and a negative nice need root; a
// refused update changes nothing.
func TestUpdateJob(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions = []Partition{{Name: "short", Default: true, MaxTime: time.Hour}, {Name: "long"}}
	})
	ctx := context.Background()
	id := h.submit(alice, func(js *spec.JobSpec) { js.Hold = true; js.TimeLimit = spec.Duration(30 * time.Minute) })
	ref := spec.JobRef{ID: id}
	dur := func(d time.Duration) *time.Duration { return &d }
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }

	if _, err := h.c.UpdateJob(ctx, alice, ref, JobUpdate{TimeLimit: dur(10 * time.Minute), Nice: num(5), Name: str("renamed")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who  Caller
		u    JobUpdate
		kind error
	}{
		{alice, JobUpdate{TimeLimit: dur(20 * time.Minute)}, spec.ErrInvalid},       // raising
		{alice, JobUpdate{QOS: str("normal")}, spec.ErrPermissionDenied},            // QOS
		{alice, JobUpdate{Nice: num(-1)}, spec.ErrPermissionDenied},                 // negative nice
		{bob, JobUpdate{Nice: num(1)}, spec.ErrPermissionDenied},                    // not bob's
		{alice, JobUpdate{Partition: str("nosuch"), Nice: num(7)}, spec.ErrInvalid}, // all or nothing
		{root, JobUpdate{TimeLimit: dur(2 * time.Hour)}, spec.ErrInvalid},           // past short's max
	} {
		if _, err := h.c.UpdateJob(ctx, tc.who, ref, tc.u); !errors.Is(err, tc.kind) {
			t.Errorf("%s %+v: %v, want %v", tc.who.User, tc.u, err, tc.kind)
		}
	}
	if _, err := h.c.UpdateJob(ctx, root, ref, JobUpdate{Partition: str("long"), TimeLimit: dur(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	j := h.job(id)
	if j.Partition != "long" || j.TimeLimit.Std() != 2*time.Hour || j.Nice != 5 || j.Name != "renamed" {
		t.Errorf("job: partition %s limit %v nice %d name %s; want long 2h 5 renamed", j.Partition, j.TimeLimit.Std(), j.Nice, j.Name)
	}
}

// TestSubmitChecksSlurmFields: an open mode other than append or
// truncate, or a negative task count, is refused at submit.
func TestSubmitChecksSlurmFields(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	for _, js := range []spec.JobSpec{
		{Script: "x", WorkDir: "/tmp", OpenMode: "rw"},
		{Script: "x", WorkDir: "/tmp", Tasks: spec.Tasks{NTasks: -1}},
	} {
		if _, err := h.c.Submit(ctx, alice, js); !errors.Is(err, spec.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", js.Tasks, err)
		}
	}
	if _, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", OpenMode: spec.OpenAppend, WCKey: "k", Tasks: spec.Tasks{NTasks: 2}}); err != nil {
		t.Error(err)
	}
}

// TestUpdateJobErrorsAsSubmit: scontrol update refuses a value with the
// message sbatch gets at submit for the same value (the shared
// spec.JobSpec.Validate and the policy checks in policy.go), and the
// server's early check (JobUpdate.Validate) says the same as the
// controller.
func TestUpdateJobErrorsAsSubmit(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions = []Partition{{Name: "short", Default: true, MaxTime: time.Hour}, {Name: "closed", State: PartitionDrain}}
	})
	ctx := context.Background()
	id := h.submit(alice, func(js *spec.JobSpec) { js.Hold = true; js.TimeLimit = spec.Duration(30 * time.Minute) })
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name   string
		who    Caller
		u      JobUpdate
		submit func(*spec.JobSpec)
	}{
		{"nice out of policy range", alice, JobUpdate{Nice: func() *int { n := 20000; return &n }()}, func(js *spec.JobSpec) { js.Nice = 20000 }},
		{"nice out of spec range", root, JobUpdate{Nice: func() *int { n := math.MaxInt32; return &n }()}, func(js *spec.JobSpec) { js.Nice = math.MaxInt32 }},
		{"control character in name", alice, JobUpdate{Name: str("a\x1bb")}, func(js *spec.JobSpec) { js.Name = "a\x1bb" }},
		{"long name", alice, JobUpdate{Name: str(strings.Repeat("n", 300))}, func(js *spec.JobSpec) { js.Name = strings.Repeat("n", 300) }},
		{"NUL in comment", alice, JobUpdate{Comment: str("a\x00")}, func(js *spec.JobSpec) { js.Comment = "a\x00" }},
		{"no such partition", alice, JobUpdate{Partition: str("nosuch")}, func(js *spec.JobSpec) { js.Partition = "nosuch" }},
		{"closed partition", alice, JobUpdate{Partition: str("closed")}, func(js *spec.JobSpec) { js.Partition = "closed" }},
		{"no such QOS", root, JobUpdate{QOS: str("nosuch")}, func(js *spec.JobSpec) { js.QOS = "nosuch" }},
		{"past the partition's limit", root, JobUpdate{TimeLimit: func() *time.Duration { d := 2 * time.Hour; return &d }()},
			func(js *spec.JobSpec) { js.TimeLimit = spec.Duration(2 * time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp"}
			tc.submit(&js)
			_, serr := h.c.Submit(ctx, alice, js) // root may not submit; these messages do not depend on who
			if serr == nil {
				t.Fatal("submit accepted it")
			}
			_, uerr := h.c.UpdateJob(ctx, tc.who, spec.JobRef{ID: id}, tc.u)
			if uerr == nil {
				t.Fatal("update accepted it")
			}
			// Submit may report more (it judges the whole job); every
			// problem the update names is one submit named.
			for _, line := range strings.Split(strings.TrimPrefix(uerr.Error(), fmt.Sprintf("update job %d: ", id)), "\n") {
				if !strings.Contains(serr.Error(), line) {
					t.Errorf("update says %q; submit said %q", line, serr)
				}
			}
			if verr := tc.u.Validate(); verr != nil && !strings.Contains(uerr.Error(), verr.Error()) {
				t.Errorf("the server's check says %q, the controller %q", verr, uerr)
			}
		})
	}
	if j := h.job(id); j.Name != "j" || j.Nice != 0 || j.Partition != "short" || j.TimeLimit.Std() != 30*time.Minute {
		t.Errorf("refused updates changed the job: %+v", j.JobSpec)
	}
}
