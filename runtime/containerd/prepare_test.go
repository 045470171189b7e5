package containerd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// TestPreparedContainer: Prepare makes the container and its task (cgroup,
// PID namespace, devices) but runs nothing of the job until
// StartPrepared, which relabels it and runs the job as its user in that
// cgroup and namespace; a prepared container nobody claims is removed by
// Delete with its cgroup.
func TestPreparedContainer(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	cdiDir := writeTestCDI(t)
	rt := newRuntime(t, addr, cdiDir)
	ctx := context.Background()
	var _ runtime.Preparer = rt

	dir := jobDir(t)
	marker := filepath.Join(dir, "ran")
	// The command is fixed when the container is prepared, so it
	// redirects its output itself (as the node's launcher does) into the
	// files StartPrepared makes.
	cfg := hostTask(t, dir, "/bin/sh", "-c",
		`exec >>`+filepath.Join(dir, "out")+` 2>>`+filepath.Join(dir, "err")+`; echo ran > `+marker+`; id -u; test -c /dev/gpud-test0 && echo dev; cat /proc/self/cgroup; readlink /proc/self/ns/pid`)
	cfg.Mounts = []runtime.Mount{{Source: dir, Dest: dir}}
	cfg.CDIDevices = []string{"gpud.test/dev=d0"}
	cfg.Labels = map[string]string{"gpud.node": "n1", "gpud.prepared": "1"}
	job := cfg
	cfg.StdoutPath, cfg.StderrPath = "", "" // the claiming job's
	if err := rt.Prepare(ctx, cfg); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	ti := listed(t, rt, cfg.ID)
	if ti.Status != runtime.StatusCreated || ti.Labels["gpud.prepared"] != "1" {
		t.Errorf("prepared container listed as %+v, want created with its prepared label", ti)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the job's command ran before StartPrepared (stat %s: %v)", marker, err)
	}
	if _, err := os.Stat(job.StdoutPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Prepare made output files (stat %s: %v)", job.StdoutPath, err)
	}

	job.Labels = map[string]string{"gpud.node": "n1", "gpud.job": "43", "gpud.prepared": ""}
	if err := rt.StartPrepared(ctx, cfg.ID, job); err != nil {
		t.Fatalf("StartPrepared: %v", err)
	}
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Fatalf("exit %d, stderr %q", es.Code, readFile(t, job.StderrPath))
	}
	out := strings.Split(strings.TrimSpace(readFile(t, job.StdoutPath)), "\n")
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
	if len(out) < 5 || out[0] != "65534" || out[1] != "dev" || !strings.Contains(out[2], cfg.ID) ||
		!strings.HasPrefix(out[len(out)-1], "pid:[") || out[len(out)-1] == hostNS {
		t.Errorf("job in the prepared container printed %q; want uid 65534, its device, a cgroup named for %s, a PID namespace of its own (host's %s)",
			out, cfg.ID, hostNS)
	}
	if o := owner(t, job.StdoutPath); o != [2]uint32{nobody, nobody} {
		t.Errorf("output file owned by %v, want the job's user", o)
	}
	ti = listed(t, rt, cfg.ID)
	if _, ok := ti.Labels["gpud.prepared"]; ok || ti.Labels["gpud.job"] != "43" {
		t.Errorf("labels after StartPrepared = %v, want the job's (gpud.job 43) and no gpud.prepared", ti.Labels)
	}
	if err := rt.StartPrepared(ctx, cfg.ID, job); !errors.Is(err, os.ErrExist) {
		t.Errorf("StartPrepared of a started container = %v, want os.ErrExist", err)
	}
	if err := rt.StartPrepared(ctx, "no-such-container", job); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("StartPrepared of a missing container = %v, want ErrNotFound", err)
	}
	if err := rt.Delete(ctx, cfg.ID); err != nil {
		t.Fatal(err)
	}

	// Unclaimed: Delete removes it, its cgroup and its waiting process.
	idle := hostTask(t, jobDir(t), "/bin/true")
	idle.ID += "-idle"
	idle.StdoutPath, idle.StderrPath = "", ""
	if err := rt.Prepare(ctx, idle); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/gpud/*-" + idle.ID) // v2
	if v1, _ := filepath.Glob("/sys/fs/cgroup/pids/gpud/*-" + idle.ID); len(v1) > 0 {
		cgs = v1
	}
	if len(cgs) != 1 {
		t.Fatalf("cgroups of the prepared container: %v, want one", cgs)
	}
	procs := readFile(t, filepath.Join(cgs[0], "cgroup.procs"))
	if len(strings.Fields(procs)) != 1 {
		t.Errorf("prepared container's cgroup holds %q, want its one waiting process", procs)
	}
	if err := rt.Delete(ctx, idle.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rt, idle.ID)
	if _, err := os.Stat(cgs[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s of the deleted prepared container: %v, want it gone", cgs[0], err)
	}
}

func listed(t *testing.T, rt runtime.Runtime, id string) runtime.TaskInfo {
	t.Helper()
	list, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range list {
		if ti.ID == id {
			return ti
		}
	}
	t.Fatalf("container %s not listed", id)
	return runtime.TaskInfo{}
}

// TestDeleteCutShort: a Delete whose context ends while it runs (an
// agent stopping while its runner deletes the container of a job that
// just ended, or while it destroys a prepared one) either did nothing
// (the context was done before it began) or deletes all: never half.
// containerd 1.6 drops a task from its list before it shuts the task's
// shim down with the request's context; a delete cut short between the
// two left a container without a task and a shim nothing ever reaps (a
// prepared container's shim, found after a standalone's stop).
func TestDeleteCutShort(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	dir := jobDir(t)
	for i := range 24 {
		cfg := hostTask(t, dir, "/bin/true")
		cfg.ID = fmt.Sprintf("%s-%d", cfg.ID, i)
		cfg.StdoutPath, cfg.StderrPath = "", ""
		cfg.Labels = map[string]string{"gpud.node": "n1", "gpud.prepared": "1"}
		if err := rt.Prepare(context.Background(), cfg); err != nil {
			t.Fatalf("Prepare %s: %v", cfg.ID, err)
		}
		want := runtime.StatusCreated
		if i%2 == 1 { // claimed, and its job ended
			job := cfg
			job.Labels = map[string]string{"gpud.node": "n1", "gpud.job": "43"}
			if err := rt.StartPrepared(context.Background(), cfg.ID, job); err != nil {
				t.Fatalf("StartPrepared %s: %v", cfg.ID, err)
			}
			wait(t, rt, cfg.ID)
			want = runtime.StatusExited
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rt.Delete(ctx, cfg.ID) }()
		time.Sleep(time.Duration(i/2) * 2 * time.Millisecond) // where the cancel lands
		cancel()
		err := <-done
		all, lerr := rt.List(context.Background())
		if lerr != nil {
			t.Fatal(lerr)
		}
		for _, ti := range all {
			if ti.ID == cfg.ID && (err == nil || ti.Status != want) {
				t.Errorf("round %d (cancel after %d ms): Delete = %v left %s %s, want it %s as it was or gone", i, i/2*2, err, cfg.ID, ti.Status, want)
			}
		}
		if err := rt.Delete(context.Background(), cfg.ID); err != nil {
			t.Fatalf("Delete %s: %v", cfg.ID, err)
		}
		// A deleted container's shim exits at once; give it 5 s.
		deadline := time.Now().Add(5 * time.Second)
		for len(shimsOf(addr)) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if s := shimsOf(addr); len(s) > 0 {
			t.Fatalf("round %d: shims %v outlive their deleted container %s", i, s, cfg.ID)
		}
	}
}
