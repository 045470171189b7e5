package containerd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// TestShimGroups: with ShimGroupSize 2, one user's containers share a
// runc shim two at a time and another user's never join it; each keeps
// its own PID namespace. Another runtime on the same containerd (a second
// agent, or the same agent restarted) never puts its containers in the
// first one's shims, and its delete of one container leaves the shim of
// the other running. A SIGKILLed shared shim ends both its containers as
// exits Wait reports (not a hang) while the other shims' containers run
// on; the user's next container starts in a fresh shim.
func TestShimGroups(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	rt, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nctx := namespaces.WithNamespace(ctx, containerd.DefaultNamespace)
	dir := jobDir(t)
	start := func(name string, uid uint32) (runtime.TaskConfig, int) {
		t.Helper()
		cfg := hostTask(t, dir, "/bin/sleep", "300")
		cfg.ID += "-" + name
		cfg.UID, cfg.GID = uid, uid
		cfg.StdoutPath, cfg.StderrPath = "", ""
		if err := rt.Start(ctx, cfg); err != nil {
			t.Fatalf("Start %s: %v", name, err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), cfg.ID) })
		return cfg, shimOf(t, cfg, c, nctx)
	}
	a, shimA := start("a", nobody)
	b, shimB := start("b", nobody)
	d, shimD := start("d", nobody) // the group of a and b is full
	o, shimO := start("o", nobody-1)
	if shimA != shimB || shimD == shimA || shimO == shimA || shimO == shimD {
		t.Fatalf("shims a %d b %d d %d (same user, group size 2), other user %d: want a and b shared, d and the other user's alone",
			shimA, shimB, shimD, shimO)
	}
	if sh := shimsOf(addr); len(sh) != 3 || !slices.Contains(sh, shimA) {
		t.Fatalf("shims of this containerd %v; want 3, with %d", sh, shimA)
	}
	if ns := pidNS(t, a, c, nctx); ns == pidNS(t, b, c, nctx) {
		t.Errorf("containers a and b in one shim share PID namespace %s", ns)
	}

	// Another runtime (size 3: a and b's shim would have room) keeps to
	// shims of its own.
	rt2, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	g := hostTask(t, dir, "/bin/sleep", "300")
	g.ID += "-g"
	g.StdoutPath, g.StderrPath = "", ""
	if err := rt2.Start(ctx, g); err != nil {
		t.Fatal(err)
	}
	defer rt2.Delete(context.Background(), g.ID)
	if sh := shimOf(t, g, c, nctx); sh == shimA || sh == shimD {
		t.Errorf("a second runtime put its container in the first one's shim %d", sh)
	}
	if err := rt2.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if ti := listed(t, rt2, b.ID); ti.Status != runtime.StatusRunning || !alive(shimB) {
		t.Fatalf("after deleting a, b is %s and its shim alive=%v; want running under the shared shim", ti.Status, alive(shimB))
	}

	// The shared shim dies: both its containers end as exits.
	if err := syscall.Kill(shimB, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// As for a container whose own shim dies: Wait fails ("ttrpc:
	// closed") and, once containerd has cleaned up after the shim, says
	// the task is gone; the node agent retries Wait and ends the job as
	// failed (its container disappeared).
	deadline := time.Now().Add(30 * time.Second)
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		es, err := rt.Wait(wctx, b.ID)
		cancel()
		if errors.Is(err, runtime.ErrNotFound) || err == nil && es.Code != 0 {
			t.Logf("b after its shim was killed: %+v, %v", es, err)
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("b's shim killed: Wait gives %+v, %v 30 s later; want the task gone or a failed exit", es, err)
		}
		time.Sleep(100 * time.Millisecond) // the agent's retry backoff
	}
	for _, x := range []runtime.TaskConfig{d, o} {
		if ti := listed(t, rt, x.ID); ti.Status != runtime.StatusRunning {
			t.Errorf("%s is %s after another shim was killed; want running", x.ID, ti.Status)
		}
	}
	if err := rt.Delete(ctx, b.ID); err != nil {
		t.Fatalf("Delete b after its shim died: %v", err)
	}
	f, shimF := start("f", nobody)
	if !alive(shimF) {
		t.Fatalf("f started but its shim %d is gone", shimF)
	}
	if err := rt.Signal(ctx, f.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if es := wait(t, rt, f.ID); es.Signal != syscall.SIGTERM {
		t.Errorf("f after SIGTERM: %+v", es)
	}
}

// TestShimGroupLastDelete: containers created in a group while the
// group's other containers are deleted, each alone or all at once (the
// shim then exits), still start: the runtime never hands a create a shim
// that is shutting down.
func TestShimGroupLastDelete(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	// Keepers go 200 ms after their group's last job: groups come and go.
	rt, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 8, ShimKeeperIdle: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	dir := jobDir(t)
	var prev []string
	for i := range 16 {
		n := 1 + i%2 // one, then two at a time
		var wg sync.WaitGroup
		errs := make([]error, len(prev)+n)
		for k, id := range prev {
			wg.Go(func() { errs[k] = rt.Delete(ctx, id) })
		}
		var next []string
		for k := range n {
			cfg := hostTask(t, dir, "/bin/true")
			cfg.ID += fmt.Sprintf("-%d-%d", i, k)
			cfg.StdoutPath, cfg.StderrPath = "", ""
			next = append(next, cfg.ID)
			wg.Go(func() { errs[len(prev)+k] = rt.Start(ctx, cfg) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: start beside the delete of the group's other containers: %v", i, err)
			}
		}
		for _, id := range next {
			if es := wait(t, rt, id); es.Code != 0 {
				t.Fatalf("round %d: %s exit %+v", i, id, es)
			}
		}
		prev = next
	}
	for _, id := range prev {
		if err := rt.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// The group's last container gone, its keeper and shim go too.
	deadline := time.Now().Add(10 * time.Second)
	for len(shimsOf(addr)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("shims %v still run 10 s after their last container was deleted", shimsOf(addr))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shimsOf lists the pids of the shims of the containerd at addr.
func shimsOf(addr string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err == nil && strings.HasPrefix(filepath.Base(strings.Split(string(cmd), "\x00")[0]), "containerd-shim") &&
			strings.Contains(string(cmd), addr+"\x00") {
			if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func ppid(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	n, err := strconv.Atoi(strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// shimOf is the pid of the shim serving cfg's container: its process's
// parent.
func shimOf(t *testing.T, cfg runtime.TaskConfig, c *client.Client, nctx context.Context) int {
	t.Helper()
	ctr, err := c.LoadContainer(nctx, cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.Task(nctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ppid(t, int(task.Pid()))
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func pidNS(t *testing.T, cfg runtime.TaskConfig, c *client.Client, nctx context.Context) string {
	t.Helper()
	ctr, err := c.LoadContainer(nctx, cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.Task(nctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", task.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestShimGroupKeeper: a group's keeper keeps its shim serving between
// jobs (the next job joins the same shim), is never listed, goes with its
// shim once the group has been idle for ShimKeeperIdle or at Close, and
// one an earlier runtime of the same node left is deleted by the next
// New of that node only.
func TestShimGroupKeeper(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	rt, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n1", ShimKeeperIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close() // at the end: it "crashes" (is not closed) before rt2
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nctx := namespaces.WithNamespace(ctx, containerd.DefaultNamespace)
	dir := jobDir(t)
	run := func(rt *containerd.Runtime, name string) int {
		t.Helper()
		cfg := hostTask(t, dir, "/bin/sh", "-c", "read x") // waits for stdin: none, so it ends at once
		cfg.ID += "-" + name
		cfg.StdoutPath, cfg.StderrPath = "", ""
		if err := rt.Prepare(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		sh := shimOf(t, cfg, c, nctx)
		if err := rt.StartPrepared(ctx, cfg.ID, cfg); err != nil {
			t.Fatal(err)
		}
		wait(t, rt, cfg.ID)
		if err := rt.Delete(ctx, cfg.ID); err != nil {
			t.Fatal(err)
		}
		return sh
	}
	first := run(rt, "1")
	if second := run(rt, "2"); second != first || !alive(first) {
		t.Fatalf("jobs one after another ran in shims %d and %d (alive %v); want the group's one, kept serving", first, second, alive(first))
	}
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("List shows %+v; want nothing (keepers are not jobs)", list)
	}
	keepers := func() int {
		ctrs, err := c.Containers(nctx, `labels."gpud.shim-keeper"`)
		if err != nil {
			t.Fatal(err)
		}
		return len(ctrs)
	}
	if n := keepers(); n != 1 {
		t.Fatalf("%d keepers; want 1", n)
	}
	// Another node's runtime leaves n1's keeper alone; n1's next one
	// deletes it (rt "crashed": not closed), and the shim exits.
	other, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if n := keepers(); n != 1 {
		t.Fatalf("a runtime of another node left %d keepers of n1; want 1", n)
	}
	rt2, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n1", ShimKeeperIdle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n := keepers(); n != 0 {
		t.Fatalf("n1's next runtime left %d keepers of its predecessor; want 0", n)
	}
	waitGone(t, first)
	// Idle for ShimKeeperIdle: the keeper and its shim go.
	sh := run(rt2, "3")
	waitGone(t, sh)
	if n := keepers(); n != 0 {
		t.Fatalf("%d keepers after their idle time; want 0", n)
	}
	// Close deletes the idle ones at once.
	rt3, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n3", ShimKeeperIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sh = run(rt3, "4")
	rt3.Close()
	waitGone(t, sh)
	rt2.Close()

	// Close deletes the keeper of a group with a job still running too
	// (no later runtime may come for it): the job's shim serves on, and
	// goes with the job.
	rt4, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n4", ShimKeeperIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	job := hostTask(t, dir, "/bin/sleep", "300")
	job.ID += "-5"
	job.StdoutPath, job.StderrPath = "", ""
	if err := rt4.Start(ctx, job); err != nil {
		t.Fatal(err)
	}
	sh = shimOf(t, job, c, nctx)
	rt4.Close()
	if n := keepers(); n != 0 {
		t.Fatalf("%d keepers after Close with a job running; want 0", n)
	}
	rt5, err := containerd.New(ctx, containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n4"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt5.Close()
	if ti := listed(t, rt5, job.ID); ti.Status != runtime.StatusRunning || !alive(sh) {
		t.Fatalf("after Close the job is %s and its shim alive=%v; want running under its shim", ti.Status, alive(sh))
	}
	if err := rt5.Delete(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	waitGone(t, sh)
}

// waitGone waits up to 10 s for process pid to end.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("shim %d still runs after 10 s", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
