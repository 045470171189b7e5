package node

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// sealIn seals one checkpoint of job id tagged tag in the checkpoint
// root st (as an earlier attempt's runner did) and dates the job's
// directory's last change at.
func sealIn(t *testing.T, st *checkpoint.Store, id spec.JobID, tag string, at time.Time) {
	t.Helper()
	if _, _, err := st.Prepare(id, tag, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.JobDir(id), "staging", "state"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkReady(id, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SealUnless(id, tag, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(st.JobDir(id), at, at); err != nil {
		t.Fatal(err)
	}
}

// TestRetainRemovesEndedCheckpoints: the agent lists its job directories
// holding a sealed checkpoint that no runner of the job uses, and of
// those the controller names removes the ones older than the retention:
// a named, old one goes; a named but young one, an old one not named,
// and a named, old one whose job has a runner on the node (a new
// attempt) stay.
func TestRetainRemovesEndedCheckpoints(t *testing.T) {
	const retention = time.Hour
	old, young := t0.Add(-2*retention), t0.Add(-retention/2)
	tagOf := func(id spec.JobID) string { return checkpoint.JobTag(int64(id) * 1000) }
	e := newEnv(t, func(e *env) {
		e.cfgExtra = func(c *Config) {
			c.CheckpointRetention = retention
			c.CheckpointReportEvery = time.Minute
		}
		st, err := checkpoint.New(filepath.Join(e.dir, "checkpoints"), 3)
		if err != nil {
			t.Fatal(err)
		}
		sealIn(t, st, 11, tagOf(11), old)   // ended, old: removed
		sealIn(t, st, 12, tagOf(12), young) // ended, young: kept
		sealIn(t, st, 13, tagOf(13), old)   // not ended: kept
		sealIn(t, st, 14, "", old)          // ended, but a new attempt runs
	})
	root := filepath.Join(e.dir, "checkpoints")
	running := asg(14, e.home)
	e.setAndWait(t, running)
	e.waitStarted(t, "gpud-14-1-node-1")
	// The runner prepared (and so changed) job 14's directory: date it
	// old again, so only the runner keeps it.
	if err := os.Chtimes(filepath.Join(root, "14"), old, old); err != nil {
		t.Fatal(err)
	}
	beats := len(e.fc.Heartbeats())
	e.fc.mu.Lock()
	e.fc.ended = []api.CkptDir{{Job: 11, Tag: tagOf(11)}, {Job: 12, Tag: tagOf(12)}, {Job: 14}}
	e.fc.mu.Unlock()
	e.clock.Advance(time.Minute) // the next report is due
	waitFor(t, "job 11's checkpoints removed", func() bool {
		_, err := os.Stat(filepath.Join(root, "11"))
		return os.IsNotExist(err)
	}, e.on()...)
	for _, id := range []string{"12", "13", "14"} {
		if _, err := os.Stat(filepath.Join(root, id)); err != nil {
			t.Errorf("job %s's checkpoint directory: %v; want kept", id, err)
		}
	}
	var sent []api.CkptDir
	for _, hb := range e.fc.Heartbeats()[beats:] {
		if hb.Sealed != nil {
			sent = hb.Sealed
		}
	}
	want := []api.CkptDir{{Job: 11, Tag: tagOf(11)}, {Job: 13, Tag: tagOf(13)}, {Job: 12, Tag: tagOf(12)}}
	if !slices.Equal(sent, want) {
		t.Errorf("heartbeat listed %+v, want %+v (oldest first, not job 14: its runner runs)", sent, want)
	}
	// Once its runner is gone, job 14's directory goes too (named,
	// older than the retention from the fake clock's now).
	e.setAndWait(t)
	e.waitExited(t, running.Alloc.ID)
	waitFor(t, "job 14's runner gone", func() bool { return !e.agent.jobRunsHere(14) }, e.on()...)
	if err := os.Chtimes(filepath.Join(root, "14"), old, old); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	waitFor(t, "job 14's checkpoints removed", func() bool {
		_, err := os.Stat(filepath.Join(root, "14"))
		return os.IsNotExist(err)
	}, e.on()...)
	if _, err := os.Stat(filepath.Join(root, "12")); err != nil {
		t.Errorf("job 12's young checkpoint directory: %v; want kept", err)
	}
}
