package jobs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/runtime/containerd"
)

// powerScripts writes the site's resume and suspend programs for the
// elastic test: resume starts a real `gpud node` agent per host of its
// hostlist argument (expanded by scontrol show hostnames, as Slurm sites
// do), unless a fail-HOST file says that host does not come up; suspend
// stops them. Both append their argument to calls.log. With nsPrefix set,
// each host is a network namespace of its own (nsPrefix+host) that resume
// makes and starts the agent in (nsenter) and suspend deletes: the agent
// reaches the controller and containerd through their unix sockets.
func powerScripts(t *testing.T, c *e2etest.Cluster, nodeConf, nsPrefix string) (resume, suspend string) {
	t.Helper()
	bin := e2etest.BinDir
	pw := filepath.Join(c.Dir, "power")
	if err := os.MkdirAll(pw, 0o755); err != nil {
		t.Fatal(err)
	}
	resume = e2etest.WriteScript(t, pw, "resume.sh", fmt.Sprintf(`#!/bin/sh
# Slurm's ResumeProgram contract: $1 is a hostlist expression.
echo "resume $1" >> %[1]s/calls.log
status=0
for h in $(%[2]s/scontrol show hostnames "$1"); do
	if [ -e %[1]s/fail-$h ]; then
		echo "cannot boot $h: no capacity in the zone" >&2
		status=1
		continue
	fi
	run=""
	if [ -n "%[7]s" ]; then
		ip netns add %[7]s$h && ip -n %[7]s$h link set lo up || { echo "cannot make namespace %[7]s$h" >&2; status=1; continue; }
		run="nsenter --net=/run/netns/%[7]s$h --"
	fi
	setsid $run %[2]s/gpud node --config %[3]s --name $h --controller %[4]s --containerd %[5]s \
		--gpus mock:dgx-h100 --state-dir %[6]s/nodes/$h --cdi-dir %[6]s/cdi >%[1]s/$h.log 2>&1 </dev/null &
	echo $! > %[1]s/$h.pid
	echo "booting $h"
done
exit $status
`, pw, bin, nodeConf, c.Addr, containerd.SocketPath(filepath.Join(c.Dir, "containerd")), c.Dir, nsPrefix))
	suspend = e2etest.WriteScript(t, pw, "suspend.sh", fmt.Sprintf(`#!/bin/sh
echo "suspend $1" >> %[1]s/calls.log
for h in $(%[2]s/scontrol show hostnames "$1"); do
	if [ -s %[1]s/$h.pid ]; then
		kill $(cat %[1]s/$h.pid)
	fi
	rm -f %[1]s/$h.pid
	[ -n "%[3]s" ] && ip netns del %[3]s$h 2>/dev/null
	echo "stopped $h"
done
exit 0
`, pw, bin, nsPrefix))
	t.Cleanup(func() {
		if nsPrefix != "" {
			for i := 1; i <= 4; i++ {
				_ = exec.Command("ip", "netns", "del", fmt.Sprintf("%scloud%d", nsPrefix, i)).Run()
			}
		}
		pids, _ := filepath.Glob(filepath.Join(pw, "*.pid"))
		for _, p := range pids {
			b, _ := os.ReadFile(p)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(pw, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, b)
			}
		}
	})
	return resume, suspend
}

// powerConfig is the fault suite's gpud.toml with [power] set: node[1-2]
// always on, cloud[1-4] declared powered down, suspend after 15 s idle.
func powerConfig(t *testing.T, dir, resume, suspend string) string {
	t.Helper()
	p := e2etest.FaultControllerConfig(t, dir)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range [][2]string{
		{`resume_program = ""`, fmt.Sprintf("resume_program = %q", resume)},
		{`suspend_program = ""`, fmt.Sprintf("suspend_program = %q", suspend)},
		{`suspend_time = ""`, `suspend_time = "15s"`},
		{`suspend_timeout = "30s"`, `suspend_timeout = "2s"`},
		{`suspend_exc_nodes = []`, `suspend_exc_nodes = ["node[1-2]"]`},
		{"program_user = \"\"\n", "program_user = \"\"\n[[power.nodes]]\nnames = \"cloud[1-4]\"\ncpus = 2\nmem = \"1G\"\ngpus = 8\ngpu_model = \"h100\"\n"},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml no longer has %q; update the power test", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestElasticPower is issue 33's elastic must-show, with real daemons: 2
// nodes always on and up to 4 more on demand (declared, powered down); a
// burst of 6 x 8-GPU jobs powers up 4 nodes through the site's resume
// program (which starts real gpud node agents), the jobs run, and after
// the idle time the 4 are powered down through the suspend program (which
// stops the agents). A resume program that fails for one node leaves no
// job stuck: the node is down~ and its job runs on another. The time from
// submit to running on a powered-down node is logged (POWER_UP_LATENCY).
func TestElasticPower(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	dir := e2etest.ShortTempDir(t)
	// The scripts need the cluster's address and directories, the
	// cluster needs the config naming the scripts: the scripts are
	// written at paths known before the cluster starts.
	c := &e2etest.Cluster{T: t, Dir: e2etest.ShortTempDir(t)}
	c.Addr = "unix://" + filepath.Join(c.Dir, "gpud.sock")
	nodeConf := e2etest.FaultNodeConfig(t, c)
	// Each cloud node in a network namespace of its own where the host
	// can make them (else loudly without: the agents share the host's).
	nsPrefix := fmt.Sprintf("gpw%d", os.Getpid()%100000)
	if why := e2etest.NetnsPrereq(); why != "" {
		t.Logf("LOUD: cloud nodes run without network namespaces here: %s", why)
		nsPrefix = ""
	}
	resume, suspend := powerScripts(t, c, nodeConf, nsPrefix)
	conf := powerConfig(t, dir, resume, suspend)
	c.Extra = []string{"--config", conf, "--kill-grace", "2s"}
	c.Start(0)
	t.Cleanup(func() {
		c.CancelAll()
		c.Stop(syscall.SIGTERM)
		e2etest.KillStrayShims(t, c.Dir)
		if t.Failed() {
			t.Logf("gpud standalone log:\n%s", c.Log.String())
		}
	})
	c.StartNode(t, "node1", nodeConf)
	c.StartNode(t, "node2", nodeConf)
	work := t.TempDir()
	pw := filepath.Join(c.Dir, "power")

	waitSinfo(c, work, map[string]string{"node1": "idle", "node2": "idle",
		"cloud1": "idle~", "cloud2": "idle~", "cloud3": "idle~", "cloud4": "idle~"})
	if r := c.CLI(work, "scontrol", "show", "node", "cloud1"); !strings.Contains(r.Stdout, "State=IDLE+POWERED_DOWN") {
		t.Errorf("scontrol show node cloud1:\n%s", r.Stdout)
	}

	// The burst.
	var ids []string
	for range 6 {
		ids = append(ids, submit(c, work, "--gpus-per-node=8", "--time=10", "--wrap", "sleep 40"))
	}
	onCloud := 0
	var latencies []time.Duration
	for _, id := range ids {
		j := c.WaitState(id, 3*time.Minute, "RUNNING", "COMPLETED")
		nodes := fmt.Sprint(j["nodes"])
		if strings.Contains(nodes, "cloud") {
			onCloud++
			sub, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(j["submit_time"]))
			start, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(j["start_time"]))
			if err1 == nil && err2 == nil {
				latencies = append(latencies, start.Sub(sub))
			}
		}
	}
	if onCloud != 4 {
		t.Fatalf("%d of the 6 jobs ran on cloud nodes, want 4", onCloud)
	}
	if nsPrefix != "" {
		// The agents the resume program started run in their own
		// network namespaces.
		self, _ := os.Readlink("/proc/self/ns/net")
		for i := 1; i <= 4; i++ {
			b, err := os.ReadFile(filepath.Join(pw, fmt.Sprintf("cloud%d.pid", i)))
			if err != nil {
				t.Fatalf("cloud%d's agent pid: %v", i, err)
			}
			ns, err := os.Readlink(filepath.Join("/proc", strings.TrimSpace(string(b)), "ns", "net"))
			if err != nil || ns == self {
				t.Errorf("cloud%d's agent runs in network namespace %q (%v), the test's is %q: want its own", i, ns, err, self)
			}
		}
	}
	t.Logf("POWER_UP_LATENCY submit to running on a powered-down node: %v", latencies)
	calls, _ := os.ReadFile(filepath.Join(pw, "calls.log"))
	if !strings.Contains(string(calls), "resume cloud[") && !strings.Contains(string(calls), "resume cloud1") {
		t.Errorf("resume program calls:\n%s", calls)
	}
	for _, id := range ids {
		c.WaitState(id, 2*time.Minute, "COMPLETED")
	}
	t.Logf("burst done; waiting for the power-down")
	// Idle for suspend_time: the four are powered down, their agents
	// stopped; node1 and node2 stay on.
	waitSinfoFor(c, work, 90*time.Second, map[string]string{"node1": "idle", "node2": "idle",
		"cloud1": "idle~", "cloud2": "idle~", "cloud3": "idle~", "cloud4": "idle~"})
	calls, _ = os.ReadFile(filepath.Join(pw, "calls.log"))
	if !strings.Contains(string(calls), "suspend cloud") {
		t.Errorf("suspend program calls:\n%s", calls)
	}
	e2etest.WaitFor(t, 30*time.Second, "cloud agents stopped", func() bool {
		pids, _ := filepath.Glob(filepath.Join(pw, "cloud*.pid"))
		return len(pids) == 0
	})
	if nsPrefix != "" {
		e2etest.WaitFor(t, 30*time.Second, "the cloud nodes' namespaces deleted", func() bool {
			out, _ := exec.Command("ip", "netns", "list").Output()
			return !strings.Contains(string(out), nsPrefix)
		})
	}

	t.Logf("powered down; now a failing resume")
	// A failing resume: cloud1 cannot boot. Two jobs fill node1 and
	// node2, the third powers up cloud1, fails, and runs on cloud2.
	if err := os.WriteFile(filepath.Join(pw, "fail-cloud1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var more []string
	for range 3 {
		more = append(more, submit(c, work, "--gpus-per-node=8", "--time=10", "--wrap", "sleep 300"))
	}
	for _, id := range more {
		j := c.WaitState(id, 3*time.Minute, "RUNNING")
		t.Logf("job %s running on %v", id, j["nodes"])
	}
	states := sinfoStates(c, work)
	if states["cloud1"] != "down~" {
		t.Errorf("cloud1 after its failed resume: sinfo %q, want down~", states["cloud1"])
	}
	if r := c.CLI(work, "scontrol", "show", "node", "cloud1"); !strings.Contains(r.Stdout, "resume failed") {
		t.Errorf("scontrol show node cloud1 lacks the failure reason:\n%s", r.Stdout)
	}
	if !strings.Contains(c.Log.String(), "no capacity in the zone") {
		t.Errorf("the resume program's output is not in the controller's log")
	}
	// End the jobs while cloud2's agent still runs to stop their
	// containers (the scripts' cleanup stops it after the cluster's).
	for _, id := range more {
		if r := c.CLI(work, "scancel", id); r.Code != 0 {
			t.Errorf("scancel %s: exit %d: %s", id, r.Code, r.Stderr)
		}
	}
	for _, id := range more {
		c.WaitState(id, 2*time.Minute, "CANCELLED")
	}
	// CANCELLED is the controller's word at once; the agent removes the
	// container after its task exits (the full run once checked in
	// between, 0.1 s after the exit).
	e2etest.WaitFor(t, 30*time.Second, "job "+more[2]+"'s container removed after its cancel",
		func() bool { return c.ContainersOf(more[2]) == 0 })
}

// waitSinfoFor is waitSinfo with its own bound.
func waitSinfoFor(c *e2etest.Cluster, dir string, d time.Duration, want map[string]string) {
	c.T.Helper()
	var got map[string]string
	e2etest.WaitFor(c.T.(*testing.T), d, fmt.Sprintf("sinfo states %v", want), func() bool {
		got = sinfoStates(c, dir)
		for n, s := range want {
			if got[n] != s {
				return false
			}
		}
		return true
	})
}
