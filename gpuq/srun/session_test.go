package srun

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

func TestParseInteractive(t *testing.T) {
	o, err := parse([]string{"--pty", "-X", "bash"})
	if err != nil || !o.pty || !o.disableStatus || o.quitOnInterrupt {
		t.Errorf("--pty -X: %+v %v", o, err)
	}
	if o, err := parse([]string{"--quit-on-interrupt", "true"}); err != nil || !o.quitOnInterrupt {
		t.Errorf("--quit-on-interrupt: %+v %v", o, err)
	}
	// -q is --qos (an allocation option), as in Slurm's srun.
	if o, err := parse([]string{"-q", "high", "true"}); err != nil || o.quitOnInterrupt {
		t.Errorf("-q high: %+v %v", o, err)
	}
}

func TestTaskRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{{[]int{0}, "0"}, {[]int{3, 0, 1, 2}, "0-3"}, {[]int{0, 1, 3, 5, 6}, "0-1,3,5-6"}} {
		if got := taskRanges(tc.in); got != tc.want {
			t.Errorf("taskRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// interruptSession is a session whose agent end is read into msgs.
func interruptSession(t *testing.T, o options) (*session, *bytes.Buffer, chan api.StepMsg) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	var stderr bytes.Buffer
	s := &session{o: o, stderr: &stderr, conn: a, enc: json.NewEncoder(a), exits: map[int]api.StepMsg{},
		start: true, step: 4, ntasks: 3}
	s.exits[2] = api.StepMsg{Kind: api.StepExit, Task: 2, Code: 1}
	msgs := make(chan api.StepMsg, 16)
	go func() {
		dec := json.NewDecoder(b)
		for {
			var m api.StepMsg
			if dec.Decode(&m) != nil {
				return
			}
			msgs <- m
		}
	}()
	return s, &stderr, msgs
}

func signalsSent(msgs chan api.StepMsg, wait time.Duration) []int {
	var got []int
	for {
		select {
		case m := <-msgs:
			got = append(got, m.Signal)
		case <-time.After(wait):
			return got
		}
	}
}

// TestInterrupt: Slurm's ^C rules. One ^C shows the tasks' states and
// sends nothing; a second within a second sends SIGINT and ends the step
// (SIGCONT, SIGTERM); a ^C more than a second later shows the states
// again. -X sends SIGINT on one ^C.
func TestInterrupt(t *testing.T) {
	s, stderr, msgs := interruptSession(t, options{jobID: "9"})
	t0 := time.Now()
	s.interrupt(t0)
	if got := signalsSent(msgs, 50*time.Millisecond); len(got) != 0 {
		t.Errorf("one ^C sent %v, want nothing", got)
	}
	want := "srun: interrupt (one more within 1 sec to abort)\nsrun: StepId=9.4 tasks 0-1: running\nsrun: StepId=9.4 task 2: exited abnormally\n"
	if stderr.String() != want {
		t.Errorf("one ^C said %q, want %q", stderr.String(), want)
	}
	s.interrupt(t0.Add(1500 * time.Millisecond)) // not within 1 s
	if got := signalsSent(msgs, 50*time.Millisecond); len(got) != 0 {
		t.Errorf("a ^C 1.5 s later sent %v, want nothing", got)
	}
	s.interrupt(t0.Add(1900 * time.Millisecond))
	got := signalsSent(msgs, 50*time.Millisecond)
	if want := []int{int(syscall.SIGINT), int(syscall.SIGCONT), int(syscall.SIGTERM)}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("two ^C within 1 s sent %v, want SIGINT, SIGCONT, SIGTERM", got)
	}
	if !strings.Contains(stderr.String(), "srun: sending Ctrl-C to StepId=9.4\n") {
		t.Errorf("two ^C said %q", stderr.String())
	}

	s, stderr, msgs = interruptSession(t, options{jobID: "9", disableStatus: true})
	s.interrupt(time.Now())
	if got := signalsSent(msgs, 50*time.Millisecond); len(got) != 1 || got[0] != int(syscall.SIGINT) || !strings.Contains(stderr.String(), "sending Ctrl-C") {
		t.Errorf("-X, one ^C: sent %v, said %q; want SIGINT", got, stderr.String())
	}
}
