package steps

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"golang.org/x/sys/unix"
)

// Interactive steps: srun --pty driven through a pseudo-terminal the test
// opens (x/sys/unix's ioctls on /dev/ptmx, which the module already
// requires, instead of a pty package as a new dependency), and ^C on a
// plain srun as SIGINT to it. srun runs on the host against the job's
// step socket, as it does in the job (srunCmd).

// testPty is a pseudo-terminal pair; the test holds the master side.
type testPty struct {
	master, slave *os.File
	mu            sync.Mutex
	out           bytes.Buffer // everything read from the master
	done          chan struct{}
}

func openTestPty(t *testing.T, rows, cols int) *testPty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	p := &testPty{master: m, slave: s, done: make(chan struct{})}
	p.resize(t, rows, cols)
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { m.Close(); s.Close() })
	return p
}

func (p *testPty) resize(t *testing.T, rows, cols int) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)}); err != nil {
		t.Fatalf("set pty size: %v", err)
	}
}

func (p *testPty) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *testPty) typ(t *testing.T, s string) {
	t.Helper()
	if _, err := p.master.Write([]byte(s)); err != nil {
		t.Fatalf("type %q: %v", s, err)
	}
}

// expect waits until the terminal has shown want after offset from; it
// returns the offset past it.
func (p *testPty) expect(t *testing.T, from int, want string, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := p.text()
		if i := strings.Index(s[min(from, len(s)):], want); i >= 0 {
			return from + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within %v; it shows:\n%q", want, timeout, s[min(from, len(s)):])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startSrunOnPty starts srun with args on p's slave side as its
// controlling terminal, as a shell on a terminal would.
func startSrunOnPty(t *testing.T, p *testPty, sock string, args ...string) (*exec.Cmd, chan error) {
	t.Helper()
	cmd := srunCmd(sock, args...)
	cmd.Env = append(cmd.Env, "TERM=xterm", "PS1=pty-prompt$ ")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitC := make(chan error, 1)
	go func() { waitC <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // waitC has room for Wait's result
	return cmd, waitC
}

// TestSrunPty: srun --pty bash in a running job is a shell on a real
// terminal: its size is srun's and follows a resize, ^C interrupts the
// command in the foreground (a 100 s sleep) and the shell carries on, and
// the shell's exit code is srun's; srun's terminal is restored after.
func TestSrunPty(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1)
	sock := stepJob(t, c, 1)
	p := openTestPty(t, 30, 100)
	before, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	_, waitC := startSrunOnPty(t, p, sock, "--pty", "bash", "--norc", "--noprofile")
	at := p.expect(t, 0, "pty-prompt$ ", 30*time.Second)

	// The terminal is srun's size, and a resize reaches it.
	p.typ(t, "stty size\r")
	at = p.expect(t, at, "30 100\r\n", 10*time.Second)
	p.resize(t, 40, 120)
	var resized bool
	for try := 0; try < 20 && !resized; try++ {
		p.typ(t, "stty size\r")
		at = p.expect(t, at, "pty-prompt$ ", 10*time.Second)
		resized = strings.Contains(p.text(), "40 120\r\n")
		time.Sleep(100 * time.Millisecond)
	}
	if !resized {
		t.Errorf("after the resize to 40x120 the step's terminal does not say so:\n%q", p.text())
	}

	// ^C is a key for the step's terminal: it interrupts the foreground
	// sleep, and the shell carries on.
	p.typ(t, "echo started-$((1+1)); sleep 100\r")
	at = p.expect(t, at, "started-2\r\n", 10*time.Second)
	time.Sleep(500 * time.Millisecond) // sleep is running
	p.typ(t, "\x03")
	start := time.Now()
	p.typ(t, "echo after-$((40+2))\r")
	at = p.expect(t, at, "after-42\r\n", 20*time.Second)
	t.Logf("^C interrupted sleep 100 in the shell; the shell answered %v later", time.Since(start).Round(time.Millisecond))

	// Its exit code is srun's.
	p.typ(t, "echo h$((0))i; exit 7\r")
	p.expect(t, at, "h0i\r\n", 10*time.Second)
	select {
	case err := <-waitC:
		var ee *exec.ExitError
		if err == nil || !errorsAs(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("srun --pty after the shell's exit 7: %v; want exit status 7", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("srun did not end with the shell; terminal:\n%q", p.text())
	}
	after, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("srun left its terminal changed: lflag %#x iflag %#x oflag %#x, was %#x %#x %#x",
			after.Lflag, after.Iflag, after.Oflag, before.Lflag, before.Iflag, before.Oflag)
	}

	// With -n2 only task 0 has a terminal; the other task runs without
	// one and its output is dropped, as under Slurm's --pty.
	p2 := openTestPty(t, 24, 80)
	_, waitC = startSrunOnPty(t, p2, sock, "--pty", "-n2", "bash", "-c", "echo task-$SLURM_PROCID; tty; sleep 0.5")
	select {
	case err := <-waitC:
		if err != nil {
			t.Errorf("srun --pty -n2: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("srun --pty -n2 did not end; terminal:\n%q", p2.text())
	}
	time.Sleep(100 * time.Millisecond) // the last bytes through the pty
	if out := p2.text(); !strings.Contains(out, "task-0\r\n/dev/pts/") || strings.Contains(out, "task-1") {
		t.Errorf("srun --pty -n2 showed %q; want task 0 on a terminal and nothing from task 1", out)
	}
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*ee = e
	}
	return ok
}

// TestSrunInterrupt: ^C (SIGINT) to a plain srun, as Slurm's srun: one
// shows the tasks' states and the step runs on; two within a second send
// SIGINT to the tasks and end the step; with -X one sends SIGINT.
func TestSrunInterrupt(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1)
	sock := stepJob(t, c, 1)
	id := regexp.MustCompile(`gpud-(\d+)-`).FindStringSubmatch(sock)[1]

	run := func(args ...string) (*exec.Cmd, *e2etest.SyncBuffer, *e2etest.SyncBuffer, chan error) {
		cmd := srunCmd(sock, args...)
		cmd.Env = append(cmd.Env, "SLURM_JOB_ID="+id)
		out, errb := &e2etest.SyncBuffer{}, &e2etest.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitC := make(chan error, 1)
		go func() { waitC <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		e2etest.WaitFor(t, 30*time.Second, "the task's first line", func() bool { return strings.Contains(out.String(), "ready") })
		// A task's first output may reach srun just before the step's
		// start does; srun then answers ^C with "job step is starting".
		time.Sleep(300 * time.Millisecond)
		return cmd, out, errb, waitC
	}
	wait := func(waitC chan error, what string) (int, time.Duration) {
		start := time.Now()
		select {
		case err := <-waitC:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return code, time.Since(start)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: srun did not end", what)
			return 0, 0
		}
	}

	// One ^C: the states, and the step goes on.
	cmd, out, errb, waitC := run("-n2", "bash", "-c", "echo ready; sleep 3; echo survived-$SLURM_PROCID")
	_ = cmd.Process.Signal(syscall.SIGINT)
	e2etest.WaitFor(t, 10*time.Second, "srun's answer to one ^C", func() bool {
		return strings.Contains(errb.String(), "srun: StepId="+id+".")
	})
	code, _ := wait(waitC, "srun after one ^C")
	if code != 0 || !strings.Contains(out.String(), "survived-0") || !strings.Contains(out.String(), "survived-1") {
		t.Errorf("one ^C: exit %d, output %q; want the step to run on to its end (exit 0)", code, out.String())
	}
	if !regexp.MustCompile(`srun: interrupt \(one more within 1 sec to abort\)\nsrun: StepId=` + id + `\.\d+ tasks 0-1: running\n`).MatchString(errb.String()) {
		t.Errorf("one ^C: srun said %q; want Slurm's interrupt line and the tasks' states", errb.String())
	}
	t.Logf("one ^C:\n%s", errb.String())

	// Two within a second: SIGINT reaches the tasks, the step ends.
	cmd, _, errb, waitC = run("bash", "-c", "echo ready; exec sleep 60")
	_ = cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(200 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	code, took := wait(waitC, "srun after two ^C")
	if code == 0 || took > 20*time.Second || !strings.Contains(errb.String(), "srun: sending Ctrl-C to StepId="+id+".") ||
		!strings.Contains(errb.String(), "task 0: interrupt") {
		t.Errorf("two ^C: exit %d after %v, srun said %q; want SIGINT to end the 60 s sleep at once", code, took, errb.String())
	}
	t.Logf("two ^C (exit %d after %v):\n%s", code, took.Round(time.Millisecond), errb.String())

	// -X: one ^C sends SIGINT.
	cmd, out, errb, waitC = run("-X", "bash", "-c", "trap 'echo got-INT; exit 5' INT; echo ready; for i in $(seq 600); do sleep 0.1; done")
	_ = cmd.Process.Signal(syscall.SIGINT)
	code, took = wait(waitC, "srun -X after one ^C")
	if code != 5 || !strings.Contains(out.String(), "got-INT") || took > 20*time.Second {
		t.Errorf("srun -X, one ^C: exit %d after %v, output %q %q; want the task's INT trap (exit 5)", code, took, out.String(), errb.String())
	}
}

// TestKill9AgentDuringStep: kill -9 of the node agent while a batch
// script's srun runs a step, the agent kept away until the task ended.
// The task runs on under its shim; the restarted agent re-adopts it, srun
// follows the step again, the task's later output and exit code reach
// srun, and the script carries on.
func TestKill9AgentDuringStep(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	work := t.TempDir()
	e2etest.WriteScript(t, work, "k9step.sh", `#!/bin/bash
srun bash -c 'echo begin; sleep 1; echo done; exit 3'
echo "srun-rc=$?"
`)
	r := c.CLI(work, "gpusubmit", "--parsable", "--output", "k9s-%j.out", "k9step.sh")
	if r.Code != 0 {
		t.Fatalf("submit: %d %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	outFile := filepath.Join(work, "k9s-"+id+".out")
	e2etest.WaitFor(t, 60*time.Second, "the step's first line", func() bool {
		b, _ := os.ReadFile(outFile)
		return strings.Contains(string(b), "begin")
	})
	start := time.Now()
	nodes["node1"].Stop(syscall.SIGKILL)
	// The agent stays away until the task has ended (its last line waits
	// in the exec's FIFO, its exit status in the shim), but less than the
	// suite's 4 s node timeout, after which the job would be requeued.
	time.Sleep(2 * time.Second)
	n := c.StartNode(t, "node1", filepath.Join(c.Dir, "node.toml"))
	j := c.WaitState(id, 90*time.Second, "COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")
	b, _ := os.ReadFile(outFile)
	text := string(b)
	t.Logf("job %s ended %v %v after the kill; output:\n%s", id, j["state"], time.Since(start).Round(time.Millisecond), text)
	if j["state"] != "COMPLETED" {
		t.Errorf("job ended %v, want COMPLETED (the script runs on to its end)", j["state"])
	}
	if strings.Count(text, "begin") != 1 || strings.Count(text, "done\n") != 1 || !strings.Contains(text, "srun-rc=3\n") {
		t.Errorf("want the step to run once through, its later output and its exit code 3 reaching srun")
	}
	if !regexp.MustCompile(`srun: lost the connection to the node agent during StepId=`+id+`\.\d+ `).MatchString(text) ||
		!regexp.MustCompile(`srun: the node agent is back; following StepId=`+id+`\.\d+ again`).MatchString(text) {
		t.Errorf("srun did not say what happened (lost the agent, then followed the step again)")
	}
	if !strings.Contains(n.Log.String(), "re-adopted a running step's tasks") {
		t.Errorf("the restarted agent did not log re-adopting the step")
	}
	// The restarted agent records the step's end: accounting has its
	// exit code 3, not a step left running until the job ended.
	want := id + ".0|FAILED|3:0"
	var acct string
	for deadline := time.Now().Add(10 * time.Second); acct != want && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		acct = strings.TrimSpace(c.CLI(work, "sacct", "-P", "-n", "-j", id+".0", "-o", "JobID,State,ExitCode").Stdout)
	}
	if acct != want {
		t.Errorf("sacct -j %s.0: %q, want %q (the restarted agent records the step's end)", id, acct, want)
	}
}

// TestKill9AgentDuringStdin: kill -9 of the node agent while srun streams
// its input to task 0 (a batch script piping 3000 numbered lines into
// srun, which writes them to a file), restarted at once. srun follows the
// step again and sends its input again from what task 0 had: every line
// arrives, once, in order, and the step ends with its exit code.
func TestKill9AgentDuringStdin(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	work := t.TempDir()
	e2etest.WriteScript(t, work, "k9in.sh", `#!/bin/bash
for i in $(seq 1 3000); do echo "line $i"; [ $((i % 50)) = 0 ] && sleep 0.05; done | srun bash -c 'cat > `+work+`/got.txt; exit 3'
echo "srun-rc=$?"
`)
	r := c.CLI(work, "gpusubmit", "--parsable", "--output", "k9in-%j.out", "k9in.sh")
	if r.Code != 0 {
		t.Fatalf("submit: %d %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	got := filepath.Join(work, "got.txt")
	e2etest.WaitFor(t, 60*time.Second, "task 0 has 200 lines of its input", func() bool {
		b, _ := os.ReadFile(got)
		return bytes.Count(b, []byte("\n")) >= 200
	})
	nodes["node1"].Stop(syscall.SIGKILL)
	b, _ := os.ReadFile(got)
	at := bytes.Count(b, []byte("\n"))
	c.StartNode(t, "node1", filepath.Join(c.Dir, "node.toml"))
	j := c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")
	out, _ := os.ReadFile(filepath.Join(work, "k9in-"+id+".out"))
	b, _ = os.ReadFile(got)
	var want strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if string(b) != want.String() {
		lines := strings.Split(string(b), "\n")
		t.Errorf("task 0's input: %d lines, want lines 1-3000 each once in order (the agent was killed at line %d); first difference near %q",
			len(lines)-1, at, firstDiff(lines, strings.Split(want.String(), "\n")))
	}
	if j["state"] != "COMPLETED" || !strings.Contains(string(out), "srun-rc=3\n") {
		t.Errorf("job ended %v; output:\n%s\nwant COMPLETED and srun's exit 3", j["state"], out)
	}
	t.Logf("agent killed after %d lines of input; output:\n%s", at, out)
}

// firstDiff is the first line of got that differs from want.
func firstDiff(got, want []string) string {
	for i := range got {
		if i >= len(want) || got[i] != want[i] {
			return fmt.Sprintf("line %d: %q", i+1, got[i])
		}
	}
	return "(the end)"
}

// TestKill9AgentDuringPtyStep: kill -9 of the node agent under srun
// --pty bash. The shell lives on under its shim with its terminal; srun
// follows the step again once the agent is back, the keys typed while it
// was away arrive, and the shell's exit code is still srun's.
func TestKill9AgentDuringPtyStep(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	sock := stepJob(t, c, 1)
	p := openTestPty(t, 24, 80)
	_, waitC := startSrunOnPty(t, p, sock, "--pty", "bash", "--norc", "--noprofile")
	at := p.expect(t, 0, "pty-prompt$ ", 30*time.Second)
	p.typ(t, "echo one-$((0+1))\r")
	at = p.expect(t, at, "one-1\r\n", 10*time.Second)

	nodes["node1"].Stop(syscall.SIGKILL)
	at = p.expect(t, at, "srun: lost the connection to the node agent", 10*time.Second)
	p.typ(t, "echo typed-while-away-$((1+2))\r")
	c.StartNode(t, "node1", filepath.Join(c.Dir, "node.toml"))
	at = p.expect(t, at, "srun: the node agent is back", 90*time.Second)
	at = p.expect(t, at, "typed-while-away-3\r\n", 10*time.Second)
	p.typ(t, "stty size; exit 4\r")
	p.expect(t, at, "24 80\r\n", 10*time.Second)
	select {
	case err := <-waitC:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
			t.Errorf("srun --pty after the shell's exit 4: %v; want exit status 4", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("srun did not end with the shell; terminal:\n%q", p.text())
	}
	t.Logf("terminal:\n%s", p.text())
}

// TestSrunPtyRemoteTask0: srun --pty whose task 0 runs on another node
// than the agent srun talks to, the nodes starting each other's tasks
// over their step listeners: task 0 still gets a terminal of srun's size
// on that node, a resize reaches it over the agent-to-agent connection,
// and its exit code is srun's.
func TestSrunPtyRemoteTask0(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 2, "--steps-over-network")
	sock := stepJob(t, c, 2) // node1's step socket
	p := openTestPty(t, 30, 100)
	_, waitC := startSrunOnPty(t, p, sock, "--pty", "-N1", "-w", "node2", "bash", "--norc", "--noprofile")
	at := p.expect(t, 0, "pty-prompt$ ", 30*time.Second)
	p.typ(t, "echo on-$SLURMD_NODENAME; stty size\r")
	at = p.expect(t, at, "on-node2\r\n30 100\r\n", 10*time.Second)
	p.resize(t, 40, 120)
	var resized bool
	for try := 0; try < 20 && !resized; try++ {
		p.typ(t, "stty size\r")
		at = p.expect(t, at, "pty-prompt$ ", 10*time.Second)
		resized = strings.Contains(p.text(), "40 120\r\n")
		time.Sleep(100 * time.Millisecond)
	}
	if !resized {
		t.Errorf("after the resize to 40x120 the remote step's terminal does not say so:\n%q", p.text())
	}
	p.typ(t, "exit 3\r")
	select {
	case err := <-waitC:
		var ee *exec.ExitError
		if err == nil || !errorsAs(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("srun --pty on node2 after the shell's exit 3: %v; want exit status 3", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("srun did not end with the remote shell; terminal:\n%q", p.text())
	}
}

// TestSrunPtyOutsideJob: `srun --gpus=1 --pty bash` on a login host (no
// step socket, the controller in the environment) makes an interactive
// allocation and gives a shell on a real terminal there: its size is
// srun's and follows a resize, it holds the job and one GPU, ^C
// interrupts the foreground command and the shell carries on, and the
// shell's exit ends srun with its code and releases the allocation.
func TestSrunPtyOutsideJob(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	p := openTestPty(t, 30, 100)
	cmd := exec.Command(filepath.Join(e2etest.BinDir, "srun"), "--gpus=1", "--pty", "bash", "--norc", "--noprofile")
	cmd.Dir = t.TempDir()
	cmd.Env = loginEnv(c, "TERM=xterm", "PS1=pty-prompt$ ")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitC := make(chan error, 1)
	go func() { waitC <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	at := p.expect(t, 0, "pty-prompt$ ", 60*time.Second)
	m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(p.text())
	if m == nil {
		t.Fatalf("srun --pty outside a job did not say which allocation it holds:\n%q", p.text())
	}
	job := m[1]
	t.Logf("srun --pty outside a job holds allocation %s", job)

	p.typ(t, "stty size\r")
	at = p.expect(t, at, "30 100\r\n", 10*time.Second)
	p.resize(t, 40, 120)
	var resized bool
	for try := 0; try < 20 && !resized; try++ {
		p.typ(t, "stty size\r")
		at = p.expect(t, at, "pty-prompt$ ", 10*time.Second)
		resized = strings.Contains(p.text(), "40 120\r\n")
		time.Sleep(100 * time.Millisecond)
	}
	if !resized {
		t.Errorf("after the resize to 40x120 the step's terminal does not say so:\n%q", p.text())
	}

	// The shell is in the allocation with one GPU.
	p.typ(t, "echo ids=$SLURM_JOB_ID:$CUDA_VISIBLE_DEVICES:; tty\r")
	at = p.expect(t, at, "ids="+job+":", 10*time.Second)
	end := p.expect(t, at, ":\r\n", 10*time.Second)
	if gpus := p.text()[at : end-3]; !regexp.MustCompile(`^\d+$`).MatchString(gpus) {
		t.Errorf("CUDA_VISIBLE_DEVICES in srun --gpus=1 --pty is %q; want one GPU index", gpus)
	}
	at = p.expect(t, end, "/dev/pts/", 10*time.Second)

	// ^C interrupts the foreground sleep; the shell carries on.
	p.typ(t, "echo started-$((1+1)); sleep 100\r")
	at = p.expect(t, at, "started-2\r\n", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	p.typ(t, "\x03")
	p.typ(t, "echo after-$((40+2))\r")
	at = p.expect(t, at, "after-42\r\n", 20*time.Second)
	c.WaitState(job, 5*time.Second, "RUNNING") // ^C left the allocation alone

	// The shell's exit is srun's, and the allocation is released.
	p.typ(t, "exit 5\r")
	select {
	case err := <-waitC:
		var ee *exec.ExitError
		if err == nil || !errorsAs(err, &ee) || ee.ExitCode() != 5 {
			t.Errorf("srun --pty outside a job after the shell's exit 5: %v; want exit status 5", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("srun did not end with the shell; terminal:\n%q", p.text())
	}
	p.expect(t, at, "Relinquishing job allocation "+job, 5*time.Second)
	c.WaitState(job, 30*time.Second, "CANCELLED", "COMPLETED", "FAILED")
	// squeue -j shows a job in any state while the controller remembers
	// it, as Slurm's does within MinJobAge: ended, not running.
	r := login(c, c.Dir, nil, "squeue", "-h", "-j", job, "-o", "%t")
	if st := strings.TrimSpace(r.Stdout); r.Code != 0 || (st != "" && st != "CA" && st != "CD" && st != "F") {
		t.Errorf("squeue -h -j %s -o %%t after srun ended: exit %d %q %q; want the job ended or gone", job, r.Code, r.Stdout, r.Stderr)
	}
}
