package node

import (
	"context"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
)

// prefetchRetry is how long an image and user that were prefetched (or
// failed to be) are not tried again: the cache answers a later job, and
// a pull that failed (denied, missing) fails the job itself when it
// starts, with the reason, rather than every heartbeat here.
const prefetchRetry = 10 * time.Minute

// prefetcher pulls the images of the jobs the controller expects to start
// on this node next (api.HeartbeatResponse.Prefetch) into the node's
// cache while they wait, one pull at a time: pulls share the node's disk
// and network with the jobs running on it, and the soonest job's image
// comes first. The pull is the job's own pull made early — the same
// cache, the same user's credentials — so the job's start finds it cached
// (or joins it, if it is still under way).
type prefetcher struct {
	mu    sync.Mutex
	busy  bool
	tried map[prefetchKey]time.Time
	// pulled is what each successful prefetch stored (its reference and
	// digest), for the container prepared for the expected job
	// (expect.go); forgotten with tried.
	pulled map[prefetchKey]runtime.PullResult
}

// prefetched returns what the prefetch of image for uid stored, if one
// succeeded lately.
func (pf *prefetcher) prefetched(image string, uid uint32) (runtime.PullResult, bool) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	res, ok := pf.pulled[prefetchKey{image, uid}]
	return res, ok
}

type prefetchKey struct {
	image string
	uid   uint32
}

// prefetch starts the pull of the first image in ps not tried lately,
// unless one is under way. It returns at once.
func (a *Agent) prefetch(ctx context.Context, ps []api.Prefetch) {
	if !a.cfg.PrefetchImages || len(ps) == 0 {
		return
	}
	puller, ok := a.rt.(runtime.ImagePuller)
	if !ok {
		return
	}
	pf := &a.pf
	now := time.Now()
	pf.mu.Lock()
	if pf.busy {
		pf.mu.Unlock()
		return
	}
	if pf.tried == nil {
		pf.tried = map[prefetchKey]time.Time{}
	}
	for k, at := range pf.tried {
		if now.Sub(at) > prefetchRetry {
			delete(pf.tried, k)
			delete(pf.pulled, k)
		}
	}
	var next *api.Prefetch
	for i := range ps {
		if ps[i].Image == "" || ps[i].Image == runtime.ImageHost {
			continue
		}
		if _, seen := pf.tried[prefetchKey{ps[i].Image, ps[i].UID}]; !seen {
			next = &ps[i]
			break
		}
	}
	if next == nil {
		pf.mu.Unlock()
		return
	}
	p := *next
	pf.tried[prefetchKey{p.Image, p.UID}] = now
	pf.busy = true
	pf.mu.Unlock()

	a.runnerWG.Add(1)
	go func() {
		defer a.runnerWG.Done()
		defer func() {
			pf.mu.Lock()
			pf.busy = false
			pf.mu.Unlock()
		}()
		log := a.log.With("job_id", p.Job, "image", p.Image, "uid", p.UID)
		req, err := a.userPull(ctx, p.Image, p.UID, p.GID)
		if err != nil {
			log.Info("image not prefetched: the user's registry credentials could not be read; the job's own pull will say why", "err", err)
			return
		}
		var done func()
		req.Progress, done = a.images.startPull(p.Job, true)
		res, err := puller.PullImage(ctx, req)
		done()
		if err != nil {
			if ctx.Err() == nil {
				log.Info("image not prefetched; the job's own pull will try again", "err", err)
			}
			return
		}
		pf.mu.Lock()
		if pf.pulled == nil {
			pf.pulled = map[prefetchKey]runtime.PullResult{}
		}
		pf.pulled[prefetchKey{p.Image, p.UID}] = res
		pf.mu.Unlock()
		log.Info("image prefetched", "ref", res.Ref, "digest", res.Digest, "cached", res.Cached, "bytes", res.Bytes,
			"pull_seconds", res.Duration.Seconds(), "expected_start", p.Start.Time)
	}()
}
