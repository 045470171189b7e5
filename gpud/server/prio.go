package server

import (
	"math"
	"net/http"

	"github.com/gpud/gpud/gpud/spec"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
)

// priorities serves GET /v1/priorities (gpuq prio). Like the queue, a
// user may read every pending job's priority that [privacy] lets it see.
func (s *Server) priorities(w http.ResponseWriter, r *http.Request) {
	if err := notNode(who(r), "job priorities"); err != nil {
		s.writeError(w, r, err)
		return
	}
	ps, err := s.c.Priorities(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.PrioritiesResponse{Jobs: make([]api.JobPriority, 0, len(ps))}
	v := s.view(r)
	var seen map[spec.JobID]bool
	if v.HidesJobs() {
		ids := make([]spec.JobID, len(ps))
		for i := range ps {
			ids[i] = ps[i].JobID
		}
		// A job's priority shows its user's fairshare: jobs and usage.
		if seen, err = s.visibleJobs(r, ids, true); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	for i := range ps {
		if seen == nil || seen[ps[i].JobID] {
			out.Jobs = append(out.Jobs, jobPriority(&ps[i]))
		}
	}
	s.writeJSON(w, out)
}

func jobPriority(p *controller.JobPriority) api.JobPriority {
	return api.JobPriority{JobID: p.JobID, User: p.User, Account: p.Account, Partition: p.Partition, QOS: p.QOS, Nice: p.Nice,
		Priority: p.Total, Factors: priorityFactors(p.Factors), Weighted: priorityFactors(p.Weighted)}
}

func priorityFactors(f priority.Factors) api.PriorityFactors {
	return api.PriorityFactors{Age: f.Age, Fairshare: f.Fairshare, JobSize: f.JobSize, Partition: f.Partition, QOS: f.QOS, Nice: f.Nice}
}

// fairshareTree serves GET /v1/fairshare (gpuq share); every user may
// read it, as sshare shows every association, but for what [privacy]
// accounts, users and usage hide.
func (s *Server) fairshareTree(w http.ResponseWriter, r *http.Request) {
	if err := notNode(who(r), "fairshare"); err != nil {
		s.writeError(w, r, err)
		return
	}
	rep, err := s.c.Fairshare(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.FairshareResponse{Rows: []api.FairshareRow{}}
	v := s.view(r)
	if rep != nil {
		for i := range rep.Rows {
			row := &rep.Rows[i]
			if row.Account != "" && !v.Account(row.Account) {
				continue // [privacy] accounts
			}
			if row.User != "" && (!v.User(row.User, row.Account) || !v.Usage(row.User, row.Account)) {
				continue // [privacy] users, usage
			}
			out.Rows = append(out.Rows, fairshareRow(row))
		}
	}
	s.writeJSON(w, out)
}

func fairshareRow(r *fairshare.Row) api.FairshareRow {
	row := api.FairshareRow{Account: r.Account, User: r.User, Parent: r.Parent, Depth: r.Depth, RawShares: r.RawShares, NormShares: r.NormShares,
		RawUsage: r.RawUsage, EffectiveUsage: r.EffectiveUsage, NormUsage: r.NormUsage, Factor: r.Factor}
	if !math.IsInf(r.LevelFS, 0) && !math.IsNaN(r.LevelFS) {
		l := r.LevelFS
		row.LevelFS = &l
	}
	return row
}
