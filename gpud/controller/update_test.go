package controller

import (
	"context"
	"errors"
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
