package controller

import (
	"context"

	"github.com/gpud/gpud/gpud/spec"
)

// CkptDir is a job's checkpoint directory on a node (api.CkptDir): the
// job's ID and the directory's tag ("" untagged).
type CkptDir struct {
	Job spec.JobID
	Tag string
}

// EndedCheckpoints returns those of a node's sealed checkpoint
// directories (its heartbeat's list) from which no job will restart, for
// the node to remove once they are older than its retention:
//   - the job ended for good: a terminal state, which no requeue leaves
//     (a job being stopped to requeue is COMPLETING, then PENDING, never
//     terminal, even when its part exited 0);
//   - the controller holds no job of the ID (purged after min_job_age,
//     or a reset state that has not numbered one so far);
//   - the job of the ID is another job: the directory is tagged, the
//     job has a tag, and they differ (a reset state's job of the same
//     ID; its start replaces the directory anyway).
//
// A pending, running, completing or suspended job's directory (same tag,
// or untagged, which a start takes as the job's) is never named.
func (c *Controller) EndedCheckpoints(ctx context.Context, who Caller, dirs []CkptDir) ([]CkptDir, error) {
	if err := requireRoot(who, "a node's checkpoint list"); err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	var out []CkptDir
	err := c.query(ctx, func() error {
		for _, d := range dirs {
			if endedFor(c.st.jobs[d.Job], d.Tag) {
				out = append(out, d)
			}
		}
		return nil
	})
	return out, err
}

// endedFor reports whether rec's job (nil: none of the ID) will never
// restart from a checkpoint directory tagged tag.
func endedFor(rec *jobRec, tag string) bool {
	if rec == nil {
		return true
	}
	var jobTag string
	if !rec.job.SubmitTime.IsZero() {
		jobTag = spec.CheckpointTag(rec.job.SubmitTime.UnixNano())
	}
	if tag != "" && jobTag != "" && tag != jobTag {
		return true
	}
	return rec.job.State.Terminal()
}
