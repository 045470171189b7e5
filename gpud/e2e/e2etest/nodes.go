package e2etest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd"
)

// The fault-injection suite. Node agents run as their own `gpud node`
// processes next to a `gpud standalone --nodes 0` (controller and private
// containerd), so one node can be stopped, killed or made to overheat
// while the controller and the other node carry on. Every node shares the
// standalone's checkpoint root, as nodes share a file system in a cluster.

// ExtNode is one `gpud node` process of a cluster.
type ExtNode struct {
	Name, Dir string
	Cmd       *exec.Cmd
	Log       *SyncBuffer
	Done      chan struct{}
}

// SyncBuffer is a log the test reads while the process writes it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FaultNodeConfig is node.toml for the suite's nodes: shared checkpoint
// root, short kill grace, and GPU health sampled every second with a 2s
// sustain, so a fault shows within seconds, and a GPU clean for 2s probed
// for readmission.
func FaultNodeConfig(t *testing.T, c *Cluster) string {
	t.Helper()
	p := filepath.Join(c.Dir, "node.toml")
	body := fmt.Sprintf(`version = 1
[node]
checkpoint_root = %q
kill_grace = "2s"
[health]
gpu_temp_max_c = 85
gpu_temp_sustain = "2s"
interval = "1s"
probe_after = "2s"
`, filepath.Join(c.Dir, "checkpoints"))
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// FaultControllerConfig is etc/gpud.toml with a 1s heartbeat and a 4s node
// timeout, and QOS high preempting low in checkpoint mode.
func FaultControllerConfig(t *testing.T, dir string) string {
	t.Helper()
	base, err := os.ReadFile(RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(base)
	for _, r := range [][2]string{
		{`node_timeout = "30s"`, `node_timeout = "4s"`},
		{`heartbeat_interval = "5s"`, `heartbeat_interval = "1s"`},
		{"preempt = [\"low\"]\npreempt_mode = \"requeue\"", "preempt = [\"low\"]\npreempt_mode = \"checkpoint\""},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml no longer has %q; update the fault suite", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	p := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// StartFaultCluster starts a controller (no nodes of its own) and the
// named node agents as separate processes.
func StartFaultCluster(t *testing.T, names ...string) (*Cluster, map[string]*ExtNode) {
	t.Helper()
	RequirePrereq(t)
	conf := FaultControllerConfig(t, ShortTempDir(t))
	c := StartCluster(t, 0, "--config", conf, "--kill-grace", "2s")
	nodeConf := FaultNodeConfig(t, c)
	nodes := map[string]*ExtNode{}
	for _, n := range names {
		nodes[n] = c.StartNode(t, n, nodeConf)
	}
	return c, nodes
}

// StartNode starts `gpud node` name against the cluster and waits until
// it is registered and up.
func (c *Cluster) StartNode(t *testing.T, name, conf string) *ExtNode {
	t.Helper()
	n := &ExtNode{Name: name, Dir: filepath.Join(c.Dir, "nodes", name), Log: &SyncBuffer{}}
	n.Cmd = exec.Command(filepath.Join(BinDir, "gpud"), "node", "--config", conf, "--name", name,
		"--controller", c.Addr, "--containerd", containerd.SocketPath(filepath.Join(c.Dir, "containerd")),
		"--gpus", "mock:dgx-h100", "--state-dir", n.Dir, "--cdi-dir", filepath.Join(c.Dir, "cdi"))
	n.Cmd.Stdout, n.Cmd.Stderr = n.Log, n.Log
	n.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.Cmd.Start(); err != nil {
		t.Fatalf("start gpud node %s: %v", name, err)
	}
	n.Done = make(chan struct{})
	go func() { _ = n.Cmd.Wait(); close(n.Done) }()
	t.Cleanup(func() {
		// Jobs first, while an agent can still stop their containers.
		_ = syscall.Kill(n.Cmd.Process.Pid, syscall.SIGCONT)
		c.CancelAll()
		n.Stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("gpud node %s log:\n%s", name, n.Log.String())
		}
	})
	WaitFor(t, 60*time.Second, "node "+name+" up", func() bool {
		select {
		case <-n.Done:
			t.Fatalf("gpud node %s exited early:\n%s", name, n.Log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		nodes, err := c.Client().Nodes(ctx)
		if err != nil {
			return false
		}
		for _, nd := range nodes {
			if nd.Name == name && nd.State != spec.NodeDown {
				return true
			}
		}
		return false
	})
	return n
}

// Stop signals the agent and waits for it to exit (kill -9 after 30s).
func (n *ExtNode) Stop(sig syscall.Signal) {
	StopProcess(n.Cmd.Process, n.Done, sig)
}

// StopProcess sends sig to the process p, unless done (closed when p has
// been waited for) says it has already exited, and waits for done; a
// process still running after 30s is killed with SIGKILL so that a test
// never hangs on an agent that ignores sig. The in-cluster and the
// multi-host agents stop alike through it.
func StopProcess(p *os.Process, done <-chan struct{}, sig syscall.Signal) {
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(p.Pid, sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		<-done
	}
}
