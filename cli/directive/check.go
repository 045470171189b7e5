package directive

import (
	"errors"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// fieldOptions names, for a spec.FieldError field that several options
// set, those options (Check blames the one given last).
var fieldOptions = map[string][]string{
	"--cpus-per-task":       {"cpus-per-task", "cpus-per-gpu", "mincpus", "ntasks-per-node", "ntasks"},
	"--mem":                 {"mem", "mem-per-cpu", "mem-per-gpu"},
	"--gpus-per-node":       {"gpus-per-node", "gpus", "gres", "gpus-per-task"},
	"--gpus":                {"gpus", "gpus-per-node", "gres", "gpus-per-task"},
	"--gpus-per-task":       {"gpus-per-task", "ntasks"},
	"--ntasks":              {"ntasks", "ntasks-per-node", "nodes"},
	"--checkpoint-interval": {"checkpoint"},
	"GPU model":             {"gpus", "gpus-per-node", "gres", "gpus-per-task"},
	"GPU profile":           {"gpus", "gpus-per-node", "gres", "gpus-per-task"},
}

// Check runs spec.JobSpec.Validate on a built job (its script attached)
// and puts each problem at the option that gave the field, as Build's
// own errors are: "line 4 of job.sh: --gpus=3 does not divide evenly
// over 2 nodes ...". A field no option set (the script, the submit directory)
// is reported as Validate words it.
func Check(js *spec.JobSpec, opts []Option) error {
	err := js.Validate()
	if err == nil {
		return nil
	}
	var errs []error
	for _, fe := range spec.FieldErrors(err) {
		names := fieldOptions[fe.Field]
		if names == nil {
			names = []string{strings.TrimPrefix(fe.Field, "--")}
		}
		var at *Option
		for i := range opts {
			for _, n := range names {
				if opts[i].Name == n {
					at = &opts[i]
				}
			}
		}
		if at == nil {
			errs = append(errs, fe)
			continue
		}
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: %s", at.Source, fe.Msg))
	}
	return errors.Join(errs...)
}
