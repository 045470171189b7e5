package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// inventoryRefresh is how often the node lists its image cache even when
// none of its own pulls changed it (an image deleted by hand, evicted by
// another process).
const inventoryRefresh = 5 * time.Minute

// imageState is what the node tells the controller about images with its
// heartbeats: the pulls under way for jobs (their progress, for squeue
// and scontrol show job) and the cache's inventory (for the scheduler to
// prefer nodes holding a job's image). Safe for concurrent use: runners
// and the prefetcher update it, the heartbeat loop reads it.
type imageState struct {
	mu    sync.Mutex
	pulls map[spec.JobID]*api.PullProgress
	// The inventory as last listed (list), its version, whether a pull
	// may have changed it since (dirty), and the version the controller
	// said it holds (known).
	list, version, known string
	images               []string
	dirty                bool
	listed               time.Time
}

// startPull notes a pull for job and returns the progress callback to
// give runtime.PullRequest and the function that ends the note (and
// marks the inventory to be listed again).
func (s *imageState) startPull(job spec.JobID, prefetch bool) (progress func(runtime.PullProgress), done func()) {
	s.mu.Lock()
	if s.pulls == nil {
		s.pulls = map[spec.JobID]*api.PullProgress{}
	}
	p := &api.PullProgress{Job: job, Prefetch: prefetch}
	s.pulls[job] = p
	s.mu.Unlock()
	progress = func(pp runtime.PullProgress) {
		s.mu.Lock()
		p.Done, p.Total = pp.Done, pp.Total
		s.mu.Unlock()
	}
	done = func() {
		s.mu.Lock()
		if s.pulls[job] == p {
			delete(s.pulls, job)
		}
		s.dirty = true
		s.mu.Unlock()
	}
	return progress, done
}

// pullsNow lists the pulls under way (at most api.MaxPulls).
func (s *imageState) pullsNow() []api.PullProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.PullProgress, 0, len(s.pulls))
	for _, p := range s.pulls {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b api.PullProgress) int { return cmp.Compare(a.Job, b.Job) })
	return out[:min(len(out), api.MaxPulls)]
}

// inventory returns the cache's inventory to send with the next
// heartbeat: nil when the controller holds this version already. It
// lists the cache when a pull may have changed it or inventoryRefresh
// has passed; a listing that fails keeps the last one.
func (s *imageState) inventory(ctx context.Context, puller runtime.ImagePuller) *api.ImageInventory {
	s.mu.Lock()
	stale := s.dirty || s.version == "" || time.Since(s.listed) > inventoryRefresh
	s.dirty = false
	s.mu.Unlock()
	if stale {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		imgs, err := puller.CachedImages(lctx)
		cancel()
		if err != nil {
			s.mu.Lock()
			s.dirty = true // try again at the next heartbeat
			s.mu.Unlock()
		} else {
			names, version := inventoryOf(imgs)
			s.mu.Lock()
			s.images, s.version, s.listed = names, version, time.Now()
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version == "" || s.version == s.known {
		return nil
	}
	return &api.ImageInventory{Version: s.version, Images: slices.Clone(s.images)}
}

// answered notes the inventory version the controller said it holds.
func (s *imageState) answered(version string) {
	s.mu.Lock()
	s.known = version
	s.mu.Unlock()
}

// inventoryOf is the names (spec.ImageKey) of the most recently used
// api.MaxNodeImages images, sorted, and their version.
func inventoryOf(imgs []runtime.CachedImage) ([]string, string) {
	imgs = slices.Clone(imgs)
	slices.SortFunc(imgs, func(a, b runtime.CachedImage) int { return b.LastUsed.Compare(a.LastUsed) })
	names := make([]string, 0, min(len(imgs), api.MaxNodeImages))
	for _, img := range imgs {
		if len(names) == api.MaxNodeImages {
			break
		}
		if k := spec.ImageKey(img.Ref); k != "" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	sum := sha256.Sum256([]byte(strings.Join(names, "\n")))
	return names, hex.EncodeToString(sum[:8])
}
