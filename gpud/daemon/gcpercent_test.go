package daemon

import (
	"runtime/debug"
	"testing"
)

// TestSetGCPercent: [controller] gc_percent sets the process's GC target,
// 0 leaves it, and a GOGC in the environment wins over the file.
func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	t.Setenv("GOGC", "")
	setGCPercent(200)
	if got := debug.SetGCPercent(100); got != 200 {
		t.Errorf("gc_percent 200: GC target %d", got)
	}
	setGCPercent(0)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("gc_percent 0: GC target %d, want Go's 100 left", got)
	}
	t.Setenv("GOGC", "300")
	setGCPercent(200)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=300 in the environment: gc_percent 200 set the target to %d; the environment's must win", got)
	}
}
