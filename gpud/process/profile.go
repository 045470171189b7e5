package process

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// StartCPUProfile starts this process's CPU profile into path; stop
// finishes and closes it.
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start the CPU profile %s: %w", path, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
