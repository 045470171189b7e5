package jobs

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// sinfoStates returns sinfo -N's node → compact state.
func sinfoStates(c *e2etest.Cluster, dir string) map[string]string {
	c.T.Helper()
	r := c.CLI(dir, "sinfo", "-N", "-h", "-o", "%N %t")
	if r.Code != 0 {
		c.T.Fatalf("sinfo: exit %d: %s", r.Code, r.Stderr)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			out[f[0]] = f[1]
		}
	}
	return out
}

// waitSinfo polls sinfo until every node in want has its state.
func waitSinfo(c *e2etest.Cluster, dir string, want map[string]string) {
	c.T.Helper()
	var got map[string]string
	e2etest.WaitFor(c.T.(*testing.T), 30*time.Second, fmt.Sprintf("sinfo states %v", want), func() bool {
		got = sinfoStates(c, dir)
		for n, s := range want {
			if got[n] != s {
				return false
			}
		}
		return true
	})
}

// TestScontrolUpdateNodesAndPartitions is issue 33's scontrol must-show:
// scontrol update NodeName=... State=DRAIN Reason=... then State=RESUME;
// a partition set State=DOWN starts nothing new until State=UP; the
// change survives a controller restart and is reported as a difference
// from the configuration.
func TestScontrolUpdateNodesAndPartitions(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 2, "--cpus", "16")
	work := t.TempDir()

	// DRAIN both nodes by hostlist, with a quoted reason.
	if r := c.CLI(work, "scontrol", "update", "NodeName=node[1-2]", "State=DRAIN", "Reason=PSU swap"); r.Code != 0 {
		t.Fatalf("scontrol update State=DRAIN: exit %d: %s", r.Code, r.Stderr)
	}
	waitSinfo(c, work, map[string]string{"node1": "drain", "node2": "drain"})
	if r := c.CLI(work, "scontrol", "show", "node", "node2"); !strings.Contains(r.Stdout, "Reason=PSU swap") {
		t.Errorf("scontrol show node node2 after DRAIN lacks Reason=PSU swap:\n%s", r.Stdout)
	}
	// Refusals in Slurm's words, nothing changed.
	if r := c.CLI(work, "scontrol", "update", "NodeName=node1", "State=DOWN"); r.Code != 2 || !strings.Contains(r.Stderr, "You must specify a reason when DOWNING or DRAINING a node") {
		t.Errorf("State=DOWN without a reason: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "scontrol", "update", "NodeName=node9", "State=RESUME"); r.Code == 0 || !strings.Contains(r.Stderr, "Invalid node name specified") {
		t.Errorf("unknown node: exit %d: %s", r.Code, r.Stderr)
	}
	held := submit(c, work, "--gpus-per-node=1", "--time=10", "--wrap", "sleep 600")
	waitReason(c, held, "Resources", 30*time.Second)
	if r := c.CLI(work, "scontrol", "update", "NodeName=node[1-2]", "State=RESUME"); r.Code != 0 {
		t.Fatalf("scontrol update State=RESUME: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(held, 30*time.Second, "RUNNING")

	// Partition DOWN: queued jobs wait saying so; UP starts them.
	parts := strings.Fields(c.CLI(work, "sinfo", "-h", "-s", "-o", "%R").Stdout)
	if len(parts) != 1 {
		t.Fatalf("want one partition, sinfo -s -o %%R says %q", parts)
	}
	part := parts[0]
	r := c.CLI(work, "scontrol", "update", "PartitionName="+part, "State=DOWN")
	if r.Code != 0 || !strings.Contains(r.Stderr, "PartitionName="+part+" State=DOWN (the configuration file says State=UP)") {
		t.Fatalf("scontrol update PartitionName=%s State=DOWN: exit %d: %s", part, r.Code, r.Stderr)
	}
	if r := c.CLI(work, "scontrol", "update", "PartitionName="+part, "State=SIDEWAYS"); r.Code != 2 || !strings.Contains(r.Stderr, "Invalid input: State=SIDEWAYS") {
		t.Errorf("bad partition state: exit %d: %s", r.Code, r.Stderr)
	}
	waiting := submit(c, work, "--gpus-per-node=1", "--time=10", "--wrap", "sleep 600")
	waitReason(c, waiting, "PartitionDown", 30*time.Second)

	// Durable: a restarted controller keeps it.
	c.Stop(syscall.SIGTERM)
	killStrayDaemons(t, c.Dir)
	c.Start(2)
	if r := c.CLI(work, "scontrol", "show", "partition", part); !strings.Contains(r.Stdout, "State=DOWN") {
		t.Fatalf("after a restart scontrol show partition says:\n%s", r.Stdout)
	}
	waitReason(c, waiting, "PartitionDown", 30*time.Second)
	if r := c.CLI(work, "scontrol", "update", "PartitionName="+part, "State=UP"); r.Code != 0 || strings.Contains(r.Stderr, "differs") {
		t.Fatalf("State=UP: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(waiting, 30*time.Second, "RUNNING")
}
