package containerd

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestSigCaught(t *testing.T) {
	// runc init's (a Go program's) mask: SIGTERM (15) and SIGINT (2)
	// among the caught; a shell's: none.
	goInit := []byte("Name:\trunc:[2:INIT]\nSigIgn:\t0000000000000000\nSigCgt:\tfffffffe7fc1feff\n")
	shell := []byte("Name:\tsh\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\n")
	for _, c := range []struct {
		status []byte
		sig    syscall.Signal
		want   bool
	}{
		{goInit, syscall.SIGTERM, true}, {goInit, syscall.SIGINT, true}, {goInit, syscall.SIGKILL, false},
		{shell, syscall.SIGTERM, false}, {[]byte("Name:\tx\n"), syscall.SIGTERM, false},
		{[]byte("SigCgt:\tzz\n"), syscall.SIGTERM, false},
	} {
		if got := sigCaught(c.status, c.sig); got != c.want {
			t.Errorf("sigCaught(%q, %v) = %v, want %v", c.status, c.sig, got, c.want)
		}
	}
}

// TestWaitInitExec: a process that catches SIGTERM, then execs a program
// that does not, is waited for until the exec (as a container's init
// that is still the runtime's own); one that never stops catching it is
// waited for initExecWait, no longer.
func TestWaitInitExec(t *testing.T) {
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := uint32(cmd.Process.Pid)
		for deadline := time.Now().Add(10 * time.Second); !catchesSignal(pid, syscall.SIGTERM); {
			if time.Now().After(deadline) {
				t.Fatalf("%q: its trap never showed in /proc/%d/status", script, pid)
			}
			time.Sleep(time.Millisecond)
		}
		return cmd
	}
	execs := start(`trap 'exit 3' TERM; sleep 0.2; exec sleep 30`)
	began := time.Now()
	waitInitExec(context.Background(), uint32(execs.Process.Pid), syscall.SIGTERM)
	if took := time.Since(began); catchesSignal(uint32(execs.Process.Pid), syscall.SIGTERM) || took >= initExecWait {
		t.Errorf("returned after %s with the process still catching SIGTERM: want it back once the process exec'd", took)
	}
	never := start(`trap 'exit 3' TERM; while :; do sleep 1; done`)
	began = time.Now()
	waitInitExec(context.Background(), uint32(never.Process.Pid), syscall.SIGTERM)
	if took := time.Since(began); took < initExecWait || took > initExecWait+2*time.Second {
		t.Errorf("waited %s for a process that always catches SIGTERM: want about %s", took, initExecWait)
	}
	if got := catchesSignal(1<<31, syscall.SIGTERM); got {
		t.Error("a missing process reads as catching the signal")
	}
}
