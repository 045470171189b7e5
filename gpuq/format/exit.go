package format

import "strconv"

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
