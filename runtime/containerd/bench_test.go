package containerd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// BenchmarkBareContainerd is the baseline for gpud's end-to-end job
// throughput: containerd's own client creating, starting, waiting for and
// deleting trivial containers (a busybox rootfs running /bin/true) with 8
// at a time, no gpud code in the path. It reports containers per second.
func BenchmarkBareContainerd(b *testing.B) {
	addr := containerdtest.Start(b)
	rootfs := b.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		b.Fatal(err)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		b.Skipf("SKIP (loud): /bin/busybox missing (apt-get install busybox-static): %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), bb, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", "true")); err != nil {
		b.Fatal(err)
	}
	c, err := client.New(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), "bench")

	run := func(id string) error {
		ctr, err := c.NewContainer(ctx, id, client.WithNewSpec(oci.WithRootFSPath(rootfs), oci.WithRootFSReadonly(), oci.WithProcessArgs("/bin/true")))
		if err != nil {
			return err
		}
		defer ctr.Delete(ctx)
		task, err := ctr.NewTask(ctx, cio.NullIO)
		if err != nil {
			return err
		}
		exitc, err := task.Wait(ctx)
		if err != nil {
			return err
		}
		if err := task.Start(ctx); err != nil {
			return err
		}
		st := <-exitc
		if _, err := task.Delete(ctx); err != nil {
			return err
		}
		if st.ExitCode() != 0 {
			return fmt.Errorf("exit %d", st.ExitCode())
		}
		return nil
	}

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := run(fmt.Sprintf("bare-%d", i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "containers/s")
}
