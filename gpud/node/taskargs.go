package node

import (
	"strings"

	"github.com/gpud/gpud/gpud/node/step"
)

// taskArgs is the container's command: the batch script on the batch
// node (with the job's arguments), the step holder elsewhere.
func taskArgs(in *taskInput) []string {
	if !in.batch() {
		return []string{"/bin/sh", "-c", step.HolderScript}
	}
	return append(scriptArgs(in.Asg.Job.Script, in.ScriptPath), in.Asg.Job.Args...)
}

// scriptArgs runs the script directly when it names its interpreter with
// a #! line, and with /bin/sh otherwise (as sbatch does).
func scriptArgs(script, path string) []string {
	if strings.HasPrefix(script, "#!") {
		return []string{path}
	}
	return []string{"/bin/sh", path}
}
