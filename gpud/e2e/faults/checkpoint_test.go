package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestCheckpointRequeueResumes is the must-show: a job that
// checkpoints every 2s is requeued after two sealed checkpoints, is asked
// to checkpoint once more before it stops, and its next attempt continues
// from that counter instead of from 0.
func TestCheckpointRequeueResumes(t *testing.T) {
	c := e2etest.StartCluster(t, 2, "--kill-grace", "2s")
	work := t.TempDir()
	e2etest.WriteScript(t, work, "counter.sh", e2etest.CounterScript)
	cl := c.Client()
	ctx := context.Background()
	r := c.CLI(work, "gpusubmit", "--parsable", "--time", "5", "--output", "ck-%j.out", "counter.sh")
	if r.Code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
	}
	jid := spec.JobID(n)
	out := filepath.Join(work, "ck-"+id+".out")
	start := time.Now()

	c.WaitState(id, 30*time.Second, "RUNNING")
	e2etest.WaitJob(t, cl, jid, 20*time.Second, "2 sealed checkpoints", func(j spec.Job) bool { return j.Checkpoints >= 2 })
	before, _ := cl.Job(ctx, jid)
	if r := c.CLI(work, "gpuq", "requeue", id); r.Code != 0 {
		t.Fatalf("gpuq requeue %s: exit %d: %s", id, r.Code, r.Stderr)
	}
	j := e2etest.WaitJob(t, cl, jid, 20*time.Second, "attempt 2 running", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	// The requeue itself sealed one more checkpoint, so nothing since the
	// last interval is lost.
	if j.Checkpoints <= before.Checkpoints || j.LastCheckpoint.Attempt != 1 {
		t.Errorf("checkpoints %d → %d (last %+v); want one more, sealed by attempt 1 at the requeue",
			before.Checkpoints, j.Checkpoints, j.LastCheckpoint)
	}
	if j.LostWork.Std() > 2*time.Second {
		t.Errorf("lost work %v, want under one interval (the requeue checkpointed first)", j.LostWork.Std())
	}

	var text string
	e2etest.WaitFor(t, 10*time.Second, "resumed line in "+out, func() bool {
		b, _ := os.ReadFile(out)
		text = string(b)
		return strings.Contains(text, "resumed from")
	})
	resumed := regexp.MustCompile(`resumed from (\d+)`).FindStringSubmatch(text)
	head := text[:strings.Index(text, "resumed from")]
	ckpts := regexp.MustCompile(`checkpoint (\d+)`).FindAllStringSubmatch(head, -1)
	if !strings.HasPrefix(text, "fresh start\n") || len(ckpts) < 3 || !strings.Contains(head, "stopped at") {
		t.Fatalf("want a fresh start, ≥ 3 checkpoints (2 periodic, 1 at requeue), a stop, then a resume; output:\n%s", text)
	}
	last := ckpts[len(ckpts)-1][1]
	if resumed[1] != last || last == "0" {
		t.Fatalf("resumed from %s, want the last checkpointed counter %s (not 0); output:\n%s", resumed[1], last, text)
	}

	show := c.CLI(work, "gpuq", "show", id)
	if show.Code != 0 || !strings.Contains(show.Stdout, "Attempt=2 ") ||
		!strings.Contains(show.Stdout, fmt.Sprintf("LastCheckpoint=%d@", j.LastCheckpoint.Seq)) {
		t.Errorf("gpuq show lacks Attempt=2 or LastCheckpoint=%d@:\n%s", j.LastCheckpoint.Seq, show.Stdout)
	}

	// Accounting keeps both attempts (sacct -D): attempt 1 REQUEUED with
	// the checkpoint it sealed at the requeue and its lost work, attempt 2
	// once it ends. Records reach accounting asynchronously, so poll.
	if r := c.CLI(work, "gpuq", "cancel", id); r.Code != 0 {
		t.Fatalf("gpuq cancel %s: exit %d: %s", id, r.Code, r.Stderr)
	}
	var hist []api.AcctAttempt
	e2etest.WaitFor(t, 30*time.Second, "two attempts of job "+id+" in gpuq acct -D --json", func() bool {
		r := c.CLI(work, "gpuq", "acct", "-j", id, "-D", "--json")
		var recs []api.AcctJob
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &recs) != nil || len(recs) != 1 {
			return false
		}
		hist = recs[0].AttemptHistory
		return len(hist) == 2 && !hist[1].EndTime.IsZero()
	})
	a1, a2 := hist[0], hist[1]
	if a1.Attempt != 1 || a1.State != spec.StateRequeued || a1.CheckpointSeq != j.LastCheckpoint.Seq ||
		a1.CheckpointTime.IsZero() || a1.LostWork != int64(j.LostWork.Std()/time.Second) || a1.EndTime.IsZero() {
		t.Errorf("accounting's attempt 1 = %+v; want REQUEUED with checkpoint %d and %v lost", a1, j.LastCheckpoint.Seq, j.LostWork.Std())
	}
	if a2.Attempt != 2 || a2.State != spec.StateCancelled || a2.LostWork != 0 || a2.StartTime.Before(a1.EndTime.Time) {
		t.Errorf("accounting's attempt 2 = %+v; want CANCELLED after attempt 1, no lost work", a2)
	}
	t.Logf("resumed from %s after %d checkpoints; lost work %v; %v end to end", last, j.Checkpoints, j.LostWork.Std(), time.Since(start).Round(time.Millisecond))
}

// TestCheckpointDirGoesWithoutSeal: every job's start makes its
// checkpoint directory under the checkpoint root (this job, without
// --checkpoint on one node: its run directory, checkpoint/run.go); a job
// that sealed nothing leaves none behind once it has ended (before, one
// stayed per job ever started).
func TestCheckpointDirGoesWithoutSeal(t *testing.T) {
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	work := t.TempDir()
	e2etest.WriteScript(t, work, "plain.sh", "#!/bin/sh\n[ -d \"$GPUD_CHECKPOINT_DIR\" ] && [ -w \"$GPUD_CHECKPOINT_DIR\" ] && echo ckpt=$GPUD_CHECKPOINT_DIR\nsleep 1\n")
	r := c.CLI(work, "gpusubmit", "--parsable", "--time", "5", "--output", "plain-%j.out", "plain.sh")
	if r.Code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	root := filepath.Join(c.Dir, "checkpoints")
	mine := func() []string {
		runs, _ := filepath.Glob(filepath.Join(root, "run-gpud-"+id+"-*"))
		if _, err := os.Lstat(filepath.Join(root, id)); err == nil {
			runs = append(runs, filepath.Join(root, id))
		}
		return runs
	}
	c.WaitState(id, 30*time.Second, "RUNNING", "COMPLETED")
	c.WaitState(id, 30*time.Second, "COMPLETED")
	e2etest.WaitFor(t, 10*time.Second, "job "+id+"'s checkpoint directory removed after the job", func() bool {
		return len(mine()) == 0
	})
	out, err := os.ReadFile(filepath.Join(work, "plain-"+id+".out"))
	if want := "ckpt=" + filepath.Join(root, "run-gpud-"+id+"-1-node1") + "\n"; err != nil || string(out) != want {
		t.Errorf("the job's output %q, %v; want %q (its run directory, there and writable)", out, err, want)
	}
}
