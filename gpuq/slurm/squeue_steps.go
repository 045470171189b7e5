package slurm

import (
	"slices"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

// squeueSteps is squeue -s/--steps[=STEPS]: the jobs' running steps
// (N.batch and srun's N.0, N.1, ...), as Slurm's step view; STEPS (a
// comma list of JOB.STEP) selects some.
func (c *Cmd) squeueSteps(ps []getopt.Parsed, jobs []spec.Job, json bool) error {
	var want []string
	for _, v := range getopt.All(ps, "steps") {
		want = append(want, splitList(v)...)
	}
	for _, w := range want {
		if _, step := spec.ParseStepRef(w); step == "" {
			return invalid("--steps=%s: name steps as JOB.STEP (42.0, 42.batch)", w)
		}
	}
	only := func(j *spec.Job, s *spec.Step) bool {
		return len(want) == 0 || slices.Contains(want, format.StepRef(j, s))
	}
	if json {
		type stepJSON struct {
			StepID    string     `json:"step_id"`
			JobID     spec.JobID `json:"job_id"`
			Partition string     `json:"partition"`
			User      string     `json:"user"`
			spec.Step
		}
		out := []stepJSON{}
		for i := range jobs {
			j := &jobs[i]
			for k := range j.Steps {
				s := &j.Steps[k]
				if s.Running() && only(j, s) {
					out = append(out, stepJSON{StepID: format.StepRef(j, s), JobID: j.ID, Partition: j.Partition, User: j.User, Step: *s})
				}
			}
		}
		return format.WriteJSON(c.Stdout, map[string]any{"steps": out})
	}
	return format.WriteSteps(c.Stdout, jobs, c.Now, getopt.Has(ps, "noheader"), only)
}
