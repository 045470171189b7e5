package containerd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// TestShimKeeperCutShort: a Start that makes a new shim group (a user's
// first job: the group's keeper is created first) and whose context ends
// part-way (the node agent stopping) leaves no shim that nothing reaps:
// once its job's container is deleted, the runtime closed (which deletes
// the idle groups' keepers) and the node's next runtime made (which
// deletes any keeper left), every shim of the containerd exits. Each round is another uid, so another group and
// keeper; the cancel lands 0 to 23.5 ms into the Start.
func TestShimKeeperCutShort(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt, err := containerd.New(context.Background(), containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n1", ShimKeeperIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.Close()
		}
	}()
	dir := jobDir(t)
	var errs []error
	for i := range 48 {
		cfg := hostTask(t, dir, "/bin/true")
		cfg.ID = fmt.Sprintf("%s-%d", cfg.ID, i)
		cfg.UID, cfg.GID = uint32(40000+i), uint32(40000+i)
		cfg.StdoutPath, cfg.StderrPath = "", ""
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rt.Start(ctx, cfg) }()
		time.Sleep(time.Duration(i) * 500 * time.Microsecond) // where the cancel lands
		cancel()
		errs = append(errs, <-done)
		if errs[i] == nil {
			wait(t, rt, cfg.ID)
		}
		if err := rt.Delete(context.Background(), cfg.ID); err != nil {
			t.Fatalf("Delete %s: %v", cfg.ID, err)
		}
	}
	rt.Close()
	closed = true
	// The node's next runtime deletes whatever keeper records are left
	// (as the next agent's start does); a shim no record knows stays.
	rt2, err := containerd.New(context.Background(), containerd.Options{Address: addr, ShimGroupSize: 4, Node: "n1", ShimKeeperIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rt2.Close()
	// Deleted containers' shims exit at once; give them 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for len(shimsOf(addr)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := shimsOf(addr); len(s) > 0 {
		var cmds []string
		for _, pid := range s {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			cmds = append(cmds, strings.ReplaceAll(string(b), "\x00", " "))
		}
		t.Errorf("shims %v outlive every container and keeper: %q; Start of each round returned %v", s, cmds, errs)
	}
}
