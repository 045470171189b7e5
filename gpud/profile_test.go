package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestProfileUntilHUP: the controller's --cpuprofile is finished at the
// first SIGHUP and the rest of the run goes to FILE.hup, both complete
// profiles (gzip-compressed pprof) once stop has run.
func TestProfileUntilHUP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ctl.pprof")
	stop, err := profileUntilHUP(p, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(p + ".hup"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s.hup 10 s after SIGHUP", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	for _, f := range []string{p, p + ".hup"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d bytes, not a finished (gzip) profile", f, len(b))
		}
	}
}
