package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// pullImage makes the job's image available on this node before anything
// of the job is made (runtime.ImagePuller: one cached copy per node,
// resolved with the job user's own credentials, imagecreds.go). A pull
// that cannot succeed fails the job before it starts, with what went
// wrong and what to do; it reports whether the job may go on.
func (r *runner) pullImage(ctx context.Context, log *slog.Logger) bool {
	ref := (&taskInput{Asg: r.asg, DefaultImage: r.d.cfg.DefaultImage}).image()
	puller, ok := r.d.rt.(runtime.ImagePuller)
	if !ok || ref == "" || ref == runtime.ImageHost {
		return true
	}
	job := &r.asg.Job
	req, err := r.d.userPull(ctx, ref, job.UID, job.GID)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		r.finish(ctx, log, runtime.ExitStatus{Code: 1}, spec.StateFailed,
			fmt.Sprintf("pull image %s for job %d on node %s: %v; make the file readable by you, or remove it", ref, r.jobID, r.d.cfg.Name, err))
		return false
	}
	ref = req.Ref
	var done func()
	req.Progress, done = r.d.images.startPull(r.jobID, false)
	defer done()
	// A cancel (scancel, time limit, preemption) ends the wait, not the
	// download: the node's cache finishes it for the next job.
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.stopCh:
			cancel()
		case <-pctx.Done():
		}
	}()
	res, err := puller.PullImage(pctx, req)
	if err != nil {
		if ctx.Err() != nil {
			// The agent is shutting down: the next one pulls again.
			return false
		}
		if pctx.Err() != nil {
			state, why := r.ending()
			r.finish(ctx, log, runtime.ExitStatus{}, state, why)
			return false
		}
		log.Warn("pull job image", "image", ref, "err", err)
		r.finish(ctx, log, runtime.ExitStatus{Code: 1}, spec.StateFailed,
			fmt.Sprintf("pull image %s for job %d on node %s: %v; %s", ref, r.jobID, r.d.cfg.Name, err, pullAdvice(err)))
		return false
	}
	r.pulled = res
	log.Info("job image ready", "image", res.Ref, "digest", res.Digest, "cached", res.Cached, "bytes", res.Bytes,
		"pull_seconds", res.Duration.Seconds())
	return true
}

// pullAdvice says what to do about a failed pull.
func pullAdvice(err error) string {
	switch {
	case errors.Is(err, runtime.ErrImageDenied):
		return "put your registry credentials in ~/.config/enroot/.credentials (machine HOST login USER password SECRET) or ~/.docker/config.json, readable by you on the nodes"
	case errors.Is(err, runtime.ErrImageNotFound):
		return "check the image's name and tag (enroot's HOST#REPO:TAG or HOST/REPO:TAG)"
	case errors.Is(err, runtime.ErrImageNoSpace):
		return "the node's image cache has no room: ask the site to raise [images] cache_max or free the disk, or use a smaller image"
	case errors.Is(err, runtime.ErrRegistryUnreachable):
		return "the registry (or its mirror) did not answer; submit again later, or ask the site about the node's network"
	}
	return "submit again; if it fails again, tell the site"
}

// userPull is the pull request of ref for the user uid:gid: the
// reference in OCI form and the user's own registry credentials, read by
// a process running as the user (imagecreds.go). An error means the
// user's credentials file could not be read.
func (d *runnerDeps) userPull(ctx context.Context, ref string, uid, gid uint32) (runtime.PullRequest, error) {
	// The CLIs send OCI references already; a job submitted over REST
	// may still use enroot's REGISTRY#IMAGE (validated on submit).
	if oci, err := spec.ParseImage(ref); err == nil {
		ref = oci
	}
	groups, err := supplementaryGroups(uid, gid)
	if err != nil {
		d.log.Debug("no supplementary groups for job user", "uid", uid, "err", err)
	}
	creds, err := userCredentials(ctx, uid, gid, groups, homeDir(uid))
	if err != nil {
		return runtime.PullRequest{}, err
	}
	return runtime.PullRequest{Ref: ref, Credentials: creds}, nil
}
