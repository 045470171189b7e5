package server

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// latestKeep is how long a job's newest sample stays in GET
// /v1/usage/latest: a job that stopped sending (it ended, its node went
// silent) drops out of gpuq top after it.
const latestKeep = 5 * time.Minute

// latestUsage keeps the newest usage sample of each job on each node, in
// memory: gpuq top's live view, which must not wait on accounting.db.
// A controller restart forgets them until the nodes' next samples.
type latestUsage struct {
	mu   sync.Mutex
	last map[latestKey]api.LatestUsage
}

type latestKey struct {
	node string
	job  spec.JobID
}

func (l *latestUsage) add(samples []accounting.UsageSample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[latestKey]api.LatestUsage{}
	}
	for _, s := range samples {
		k := latestKey{s.Node, s.JobID}
		if old, ok := l.last[k]; ok && (old.Attempt > s.Attempt || old.Attempt == s.Attempt && !s.End.After(old.End.Time)) {
			continue // a retry or a late older sample
		}
		l.last[k] = api.LatestUsage{Node: s.Node, JobID: s.JobID, Attempt: s.Attempt, End: spec.NewTime(s.End), GPUs: s.GPUs,
			GPUUtilAvg: s.GPUUtilAvg, GPUUtilMax: s.GPUUtilMax, GPUMemMiB: s.GPUMemMiB, PowerW: s.PowerW}
	}
}

// list returns the samples newer than now-latestKeep by node and job,
// forgetting older ones.
func (l *latestUsage) list(now time.Time) []api.LatestUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]api.LatestUsage, 0, len(l.last))
	for k, u := range l.last {
		if now.Sub(u.End.Time) > latestKeep {
			delete(l.last, k)
			continue
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b api.LatestUsage) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.JobID, b.JobID))
	})
	return out
}

// usageLatest serves GET /v1/usage/latest (gpuq top) to any identified
// caller, but for the jobs [privacy] jobs or usage hide from it.
func (s *Server) usageLatest(w http.ResponseWriter, r *http.Request) {
	if err := notNode(who(r), "live usage"); err != nil {
		s.writeError(w, r, err)
		return
	}
	samples := s.latest.list(s.now())
	if v := s.view(r); v.HidesJobs() {
		ids := make([]spec.JobID, len(samples))
		for i, u := range samples {
			ids[i] = u.JobID
		}
		seen, err := s.visibleJobs(r, ids, true)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		samples = slices.DeleteFunc(samples, func(u api.LatestUsage) bool { return !seen[u.JobID] })
	}
	s.writeJSON(w, api.LatestUsageResponse{Samples: samples})
}
