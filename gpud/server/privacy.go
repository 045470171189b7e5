package server

import (
	"errors"
	"net/http"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// What each reader may see of other users ([privacy], Slurm's
// PrivateData, and hidden partitions) is the controller's Viewer; these
// apply it to the /v1 answers, which Slurm's REST API (gpud/slurmrest)
// serves through, so every command and both APIs show the same.

// view is the request's controller.Viewer (an operator sees as root).
func (s *Server) view(r *http.Request) controller.Viewer { return s.c.Viewer(s.viewer(r)) }

// unseenJob is the answer about a job the reader may not see: the one
// about a job that does not exist.
func unseenJob(ref spec.JobRef) error {
	return spec.Errorf(spec.ErrNotFound, "job %s not found; gpuq --all lists the jobs the controller knows", ref)
}

// hideRefusal turns a refusal to act on a job the reader may not see
// (which names its owner) into the answer about a job that does not
// exist.
func (s *Server) hideRefusal(r *http.Request, ref spec.JobRef, err error) error {
	if err == nil || !errors.Is(err, spec.ErrPermissionDenied) {
		return err
	}
	v := s.view(r)
	if v.All() {
		return err
	}
	j, jerr := s.c.JobByRef(r.Context(), ref)
	if jerr == nil && !v.Job(&j) {
		return unseenJob(ref)
	}
	return err
}

// visibleJobs keeps, of ids, those of jobs the reader may see and (with
// usage) whose usage it may see.
func (s *Server) visibleJobs(r *http.Request, ids []spec.JobID, usage bool) (map[spec.JobID]bool, error) {
	v := s.view(r)
	views, err := s.c.ListJobs(r.Context(), controller.JobFilter{IDs: ids})
	if err != nil {
		return nil, err
	}
	out := make(map[spec.JobID]bool, len(views))
	for _, jv := range views {
		j := jv.Job()
		if v.Job(&j) && (!usage || v.Usage(j.User, j.Account)) {
			out[j.ID] = true
		}
	}
	return out, nil
}
