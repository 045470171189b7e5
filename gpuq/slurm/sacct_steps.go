package slurm

import (
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
)

// sacctRows lists each job and under it its steps (N.batch, N.0, N.1,
// ...), as sacct does. A job named with steps only (-j 42.0,42.batch)
// shows just those steps.
func sacctRows(jobs []api.AcctJob, sels []jobSel) []api.AcctJob {
	return format.ExpandSteps(jobs, func(j *api.AcctJob, step string) bool {
		whole, named := len(sels) == 0, false
		for _, s := range sels {
			if s.ref.ID != j.ID && !(j.ArrayJobID != 0 && s.ref.ID == j.ArrayJobID) {
				continue
			}
			named = true
			if s.step == "" {
				whole = true
			} else if s.step == step {
				return true
			}
		}
		if !named {
			whole = true // selected another way (an array task's own id)
		}
		return whole
	})
}
