package node

import (
	"context"
	"fmt"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
)

// scontrol notify: the controller keeps a job's latest notify messages
// (spec.Job.Notices); the node that runs the batch script appends each
// new one to the job's stderr once, as Slurm's slurmstepd writes it
// ("slurmstepd: error: MESSAGE"). The file is the user's: it is opened
// with the user's rights, never following a symlink, and checked on its
// descriptor before anything is written (safefs.AppendUserFile). The
// container's own shell appends to the same file (>>), so neither write
// overwrites the other.

// notify writes asg's notify messages for this allocation that are newer
// than the last one written. Only the reconcile goroutine calls it. A
// node that does not run the batch script (another rank, an srun or
// salloc allocation) writes nothing; a message sent before the container
// started waits for the next assignments answer (the first start empties
// the file). A message that cannot be written (the directory is gone) is
// logged and not retried: it would fail the same way on every answer.
func (r *runner) notify(ctx context.Context, asg *api.Assignment, self spec.NodeAlloc) {
	r.mu.Lock()
	last := r.noticeSeq
	r.mu.Unlock()
	var msg []byte
	seq := last
	for _, n := range asg.Job.Notices {
		if n.AllocID == r.allocID && n.Seq > last {
			msg = fmt.Appendf(msg, "slurmstepd: error: %s\n", n.Message)
			seq = max(seq, n.Seq)
		}
	}
	if seq == last {
		return
	}
	log := r.log()
	if self.Rank == 0 && !asg.Job.Interactive {
		if !r.outputReady.Load() {
			return
		}
		_, stderr := outputPaths(&asg.Job, r.d.cfg.Name, self.Rank)
		if stderr != "" {
			err := r.appendOutput(stderr, &asg.Job, msg)
			if err != nil {
				log.Warn("write notify message to the job's stderr; it is dropped", "path", stderr, "notice_seq", seq, "err", err)
			} else {
				log.Info("notify message written to the job's stderr", "path", stderr, "notice_seq", seq)
			}
		}
	}
	r.mu.Lock()
	r.noticeSeq = seq
	r.mu.Unlock()
	if err := r.d.ob.markNotice(ctx, r.allocID, seq); err != nil {
		log.Warn("remember written notify message", "err", err)
	}
}

// appendOutput appends b to the job's output file path with the job
// user's rights.
func (r *runner) appendOutput(path string, job *spec.Job, b []byte) error {
	groups, err := supplementaryGroups(job.UID, job.GID)
	if err != nil {
		return fmt.Errorf("groups of uid %d: %w", job.UID, err)
	}
	return safefs.AppendUserFile(path, safefs.Cred{UID: job.UID, GID: job.GID, Groups: groups}, b)
}
