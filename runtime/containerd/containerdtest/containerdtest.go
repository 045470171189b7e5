// Package containerdtest starts a private containerd for tests that need a
// real one (runtime/containerd's integration tests, the node agent's, the
// end-to-end tests). It imports runtime/containerd and the containerd client
// and nothing from gpud/*.
package containerdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

	"github.com/gpud/gpud/runtime/containerd"
)

// Missing returns why a private containerd cannot run here ("" if it can):
// not root, or containerd, its runc shim or runc not on PATH.
func Missing() string {
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, "not running as root")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			why = append(why, bin+" not on PATH")
		}
	}
	return strings.Join(why, ", ")
}

// Require skips the test, loudly, where a private containerd cannot run
// (see Missing); with CI=true it fails the test instead, so CI never passes
// by skipping.
func Require(t testing.TB) {
	t.Helper()
	if why := Missing(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("containerd integration test cannot run: %s (CI=true, so this is a failure)", why)
		}
		t.Skipf("SKIPPED: containerd integration test needs root, containerd and runc: %s", why)
	}
}

// MissingCrun returns why job containers cannot run under crun here ("" if
// they can): a private containerd cannot run (Missing), crun is not on
// PATH, or crun refuses the host's cgroups (containerd.CrunCgroupProblem).
func MissingCrun() string {
	if why := Missing(); why != "" {
		return why
	}
	if Crun() == "" {
		return "crun not on PATH (apt-get install crun) and GPUD_TEST_CRUN not set"
	}
	return containerd.CrunCgroupProblem("/sys/fs/cgroup")
}

// Crun is the crun the crun tests run: $GPUD_TEST_CRUN (an absolute path,
// e.g. a newer crun than the distribution's), else crun on PATH; "" if
// neither.
func Crun() string {
	if p := os.Getenv("GPUD_TEST_CRUN"); p != "" {
		return p
	}
	p, err := exec.LookPath("crun")
	if err != nil {
		return ""
	}
	return p
}

// RequireCrun skips the test, loudly, where job containers cannot run
// under crun (see MissingCrun); with CI=true it fails the test instead:
// .ci/run installs crun and sets the cgroups up for it.
func RequireCrun(t testing.TB) {
	t.Helper()
	if why := MissingCrun(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("crun test cannot run: %s (CI=true, so this is a failure)", why)
		}
		t.Skipf("SKIPPED: crun test needs root, containerd and crun on cgroups crun accepts: %s", why)
	}
}

// Start starts a private containerd in a short temporary directory and
// returns its socket address. Cleanup deletes every container left in it,
// stops it, prints its log if the test failed, and removes the directory.
// Where containerd cannot run it skips the test loudly, except with CI=true,
// where a missing prerequisite fails the test.
func Start(t testing.TB) string {
	t.Helper()
	return StartIn(t, "")
}

// StartIn is Start with the daemon's directory made in parent ("": the
// system's temporary directory): a test whose jobs must be able to reach
// containerd's files puts them outside /tmp and /run, which every job
// gets its own of.
func StartIn(t testing.TB, parent string) string {
	t.Helper()
	Require(t)
	// os.MkdirTemp, not t.TempDir: the socket path must stay under 108
	// bytes whatever the test's name.
	dir, err := os.MkdirTemp(parent, "ctd")
	if err != nil {
		t.Fatalf("create containerd directory: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := containerd.StartDaemon(ctx, containerd.DaemonOptions{Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("start private containerd: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := DeleteAll(ctx, d.Address()); err != nil {
			t.Errorf("clean up containerd %s: %v", d.Address(), err)
		}
		if err := d.Stop(ctx); err != nil {
			t.Errorf("stop containerd: %v", err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(d.LogPath()); err == nil {
				t.Logf("containerd log (%s):\n%s", d.LogPath(), b)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove containerd directory: %v", err)
		}
	})
	return d.Address()
}

// DeleteAll kills and deletes every task and container in every namespace of
// the containerd at address, so no shim or snapshot mount outlives a test.
func DeleteAll(ctx context.Context, address string) error {
	c, err := client.New(address)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", address, err)
	}
	defer c.Close()
	nss, err := c.NamespaceService().List(ctx)
	if err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	var errs []error
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := c.Containers(nctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list containers in %s: %w", ns, err))
			continue
		}
		for _, ctr := range ctrs {
			id := ctr.ID()
			ts := c.TaskService()
			if _, err := ts.Kill(nctx, &tasks.KillRequest{ContainerID: id, Signal: uint32(syscall.SIGKILL), All: true}); err == nil {
				_, _ = ts.Wait(nctx, &tasks.WaitRequest{ContainerID: id})
			}
			if _, err := ts.Delete(nctx, &tasks.DeleteTaskRequest{ContainerID: id}); err != nil {
				if err := errgrpc.ToNative(err); !errdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("delete task %s/%s: %w", ns, id, err))
				}
			}
			if err := ctr.Delete(nctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete container %s/%s: %w", ns, id, err))
			}
		}
	}
	return errors.Join(errs...)
}
