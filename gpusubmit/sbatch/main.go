// Command sbatch is Slurm's sbatch for gpud: a submission to a controller
// on a unix socket is sent by this small program itself (package
// gpusubmit/quick, which says why it is a program of its own); anything
// else runs the full gpusubmit beside it, as sbatch.
package main

import (
	"os"

	"github.com/gpud/gpud/cli/exitstatus"
	"github.com/gpud/gpud/gpusubmit/quick"
)

func main() {
	code, h := quick.Run(os.Args, os.Stdin, os.Stdout, os.Stderr)
	if h != nil {
		err := quick.Exec(os.Args, h)
		exitstatus.Print(os.Stderr, "sbatch", err)
		code = exitstatus.Code(err)
	}
	os.Exit(code)
}
