package step

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
)

// cwdFallback is where a step starts whose working directory the job
// cannot see, as slurmstepd: every job has its own /tmp.
const cwdFallback = "/tmp"

// stepCwd is the directory a step's tasks on this node start in: srun's
// cwd when the job's container sees it, else /tmp with slurmstepd's
// error line for the step's stderr (a checkout under the host's /tmp,
// hidden by the job's own /tmp, say). A check that cannot tell (no
// running task, no openat2) keeps cwd: the exec then says what is wrong.
func stepCwd(ctx context.Context, rt runtime.Runtime, ctr, cwd string) (string, string) {
	dc, ok := rt.(runtime.DirChecker)
	if cwd == "" || !ok {
		return cwd, ""
	}
	err := dc.ContainerDir(ctx, ctr, cwd)
	var why string
	switch {
	case errors.Is(err, unix.ENOENT):
		why = "No such file or directory"
	case errors.Is(err, unix.ENOTDIR):
		why = "Not a directory"
	default:
		return cwd, ""
	}
	return cwdFallback, fmt.Sprintf("slurmstepd: error: couldn't chdir to `%s': %s: going to %s instead\n", cwd, why, cwdFallback)
}

// warnCwd writes stepCwd's line once for the node's part, on the stderr
// of its first task.
func warnCwd(out sink, st tasks, line string) {
	if line != "" && len(st.Tasks) > 0 {
		taskWriter{out, api.StepStderr, st.Tasks[0]}.Write([]byte(line))
	}
}
