package server_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// mountOver mounts a file system over dir (a read-only bind of itself or
// a small tmpfs); undo (also run by t.Cleanup) removes it. It needs root;
// without it the test is skipped loudly.
func mountOver(t *testing.T, dir string, readOnly bool, tmpfsSize string) (undo func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (loud): mounting over the state dir needs root")
	}
	if readOnly {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mount %s: %v", dir, err)
		}
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			t.Fatalf("remount %s read-only: %v", dir, err)
		}
	} else if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+tmpfsSize); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v", tmpfsSize, dir, err)
	}
	done := false
	undo = func() {
		if !done {
			done = true
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	}
	t.Cleanup(undo)
	return undo
}

// TestFullStateDirRefusesSubmissions: when the state directory's disk is
// full, submissions are refused with a message saying so; every one that
// was acknowledged is there once space is back, across a restart too.
func TestFullStateDirRefusesSubmissions(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpud")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mountOver(t, dir, false, "8m")
	addr, _, stop := servertest.Start(t, nil, servertest.Options{Dir: dir})
	c := client(t, addr)
	ctx := ctxT(t)
	// Leave about 1 MiB free, then submit 64 KiB scripts until refused.
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	free := int64(st.Bavail) * st.Bsize
	if err := os.WriteFile(filler, make([]byte, free-1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	js := jobSpec("big")
	js.Script = "#!/bin/sh\n# " + strings.Repeat("x", 64<<10) + "\ntrue\n"
	var acked []spec.JobID
	var refusal error
	for range 200 {
		sub, err := c.Submit(ctx, api.SubmitRequest{Job: js})
		if err != nil {
			refusal = err
			break
		}
		acked = append(acked, sub.ID)
	}
	if refusal == nil {
		t.Fatalf("%d submissions of 64 KiB accepted on a full disk", len(acked))
	}
	if !errors.Is(refusal, spec.ErrUnavailable) || !strings.Contains(refusal.Error(), "cannot save controller state") ||
		!strings.Contains(refusal.Error(), "check the state directory's disk") {
		t.Fatalf("refusal on a full disk: %v; want unavailable, saying the state cannot be saved and what to check", refusal)
	}
	t.Logf("%d acknowledged, then refused with: %v", len(acked), refusal)
	if all, err := c.Jobs(ctx, api.JobFilter{All: true}); err != nil || !cmp.Equal(ids(all), acked) {
		t.Fatalf("jobs while full = %v, %v; want exactly the acknowledged %v", ids(all), err, acked)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("after")})
	if err != nil || sub.ID != acked[len(acked)-1]+1 {
		t.Fatalf("submit with space again = %d, %v; want id %d (the refused one never got an id)", sub.ID, err, acked[len(acked)-1]+1)
	}
	acked = append(acked, sub.ID)
	stop()
	addr, _, _ = servertest.Start(t, nil, servertest.Options{Dir: dir})
	all, err := client(t, addr).Jobs(ctx, api.JobFilter{All: true})
	if err != nil || !cmp.Equal(ids(all), acked) {
		t.Fatalf("after restart jobs = %v, %v; want the acknowledged %v", ids(all), err, acked)
	}
}

// TestReadOnlyStateDirRefusedAtStart: a controller whose state directory
// is read-only does not start, and says why and where.
func TestReadOnlyStateDirRefusedAtStart(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpud")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	_, _, stop := servertest.Start(t, nil, servertest.Options{Dir: dir})
	stop()
	mountOver(t, dir, true, "")
	_, err = store.Open(ctxT(t), filepath.Join(dir, "state.db"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "state.db")) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("open state db on a read-only dir: %v; want an error naming the file and saying it is read-only", err)
	}
	t.Logf("refused with: %v", err)
}
