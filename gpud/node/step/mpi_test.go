package step

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// pmiClient is a task's PMI-1 connection to its node's PMI server.
type pmiClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialPMI(t *testing.T, dir string) *pmiClient {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(dir, pmiSockName(0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &pmiClient{t: t, c: c, br: bufio.NewReader(c)}
	p.say("cmd=init pmi_version=1 pmi_subversion=1")
	if got := p.read(); !strings.Contains(got, "rc=0") {
		t.Fatalf("PMI init answered %q", got)
	}
	return p
}

func (p *pmiClient) say(line string) {
	p.t.Helper()
	if _, err := fmt.Fprintf(p.c, "%s\n", line); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pmiClient) read() string {
	p.t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := p.br.ReadString('\n')
	if err != nil {
		p.t.Fatalf("PMI answer: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestMPIFenceFollowedAgain: a 2-node srun --mpi=pmi2 step over the step
// listeners, whose second node's PMI server is in a fence when the
// connection between the agents breaks: the first agent follows the part
// again, the fence completes once the first node's task joins it, and
// each node's task then reads the other's key.
func TestMPIFenceFollowedAgain(t *testing.T) {
	c := newTestCluster(t, "n1", "n2")
	c.tools = t.TempDir() // the launcher's directory: the fake runtime runs nothing from it
	a1 := c.start("n1", false)
	a2 := c.start("n2", false)
	s := runStep(t, a1.al, api.StepRequest{Args: []string{"mpi"}, Env: []string{}, MPI: "pmi2"})
	t0, t1 := c.rt.proc(t, execID(0, 0)), c.rt.proc(t, execID(0, 1))

	p1 := dialPMI(t, c.dirs["n2"])
	p1.say("cmd=put kvsname=7.0 key=from1 value=v1")
	if got := p1.read(); !strings.Contains(got, "rc=0") {
		t.Fatalf("put on n2: %q", got)
	}
	p1.say("cmd=barrier_in")
	// The fence request is on its way or arrived: the connection that
	// carries it (and will carry the answer) breaks.
	a2.ln.cut()

	p0 := dialPMI(t, c.dirs["n1"])
	p0.say("cmd=put kvsname=7.0 key=from0 value=v0")
	if got := p0.read(); !strings.Contains(got, "rc=0") {
		t.Fatalf("put on n1: %q", got)
	}
	p0.say("cmd=barrier_in")
	for _, p := range []*pmiClient{p0, p1} {
		if got := p.read(); got != "cmd=barrier_out rc=0" {
			t.Fatalf("barrier answered %q", got)
		}
	}
	p0.say("cmd=get kvsname=7.0 key=from1")
	p1.say("cmd=get kvsname=7.0 key=from0")
	if got0, got1 := p0.read(), p1.read(); !strings.Contains(got0, "value=v1") || !strings.Contains(got1, "value=v0") {
		t.Errorf("after the fence: n1 got %q, n2 got %q", got0, got1)
	}
	t1.exit(0, 0)
	t0.exit(0, 0)
	s.until("the step's end", func() bool { return s.done != nil })
}
