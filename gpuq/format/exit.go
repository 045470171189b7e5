package format

import (
	"strconv"

	"github.com/gpud/gpud/gpud/spec"
)

// ExitCode is a job's exit as Slurm prints it, code:signal. A job killed
// by signal N (the node reports exit 128+N, as a shell would) reads 0:N,
// as in Slurm: a cancelled job reads 0:15, one killed after the grace
// time 0:9.
func ExitCode(code, sig int) string {
	if sig > 0 && code == 128+sig {
		code = 0
	}
	return strconv.Itoa(code) + ":" + strconv.Itoa(sig)
}

// OOMSignal is the signal Slurm's ExitCode shows for a job the kernel's
// OOM killer ended: Slurm records SIG_OOM (253), and code:signal shows
// the low 7 bits of the status, 125.
const OOMSignal = 125

// StateExitCode is ExitCode as Slurm shows it for a job in state st: an
// OUT_OF_MEMORY job reads 0:125 (whatever signal the OOM killer used),
// as in Slurm's sacct and scontrol.
func StateExitCode(st spec.JobState, code, sig int) string {
	if st == spec.StateOutOfMemory {
		return "0:" + strconv.Itoa(OOMSignal)
	}
	return ExitCode(code, sig)
}
