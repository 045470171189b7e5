package containerd_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// BenchmarkBareContainerdShimGroup is BenchmarkBareContainerd (8 at a
// time) with each container's own runc v2 shim ("own") or all of them
// in shims shared through the io.containerd.runc.v2.group annotation
// ("grouped": one group per worker, kept alive by an anchor container
// created but not started, so every container joins a running shim: the
// most grouping can save); "crun" and "crun-grouped" are the same with
// crun as the shim's OCI runtime instead of runc (skipped where crun
// cannot run, containerdtest.MissingCrun); "crun-grouped-robind" is
// crun-grouped with crun run from the read-only bind gpud's node agent
// gives its shims (ocireadonly.go: crun then does not copy and re-execute
// itself at each run), bare containerd given the same. Besides containers/s it reports the CPU time
// of containerd and everything it forks (shims, runc; a cpuacct cgroup of
// their own) per container, which other load on the machine changes less.
func BenchmarkBareContainerdShimGroup(b *testing.B) {
	addr := containerdtest.Start(b)
	rootfs := busyboxRootfs(b, "true", "sleep")
	c, err := client.New(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), "bench")
	run := func(id, group, binary string, start bool) error {
		opts := []oci.SpecOpts{oci.WithRootFSPath(rootfs), oci.WithRootFSReadonly(), oci.WithProcessArgs("/bin/true")}
		if group != "" {
			opts = append(opts, oci.WithAnnotations(map[string]string{"io.containerd.runc.v2.group": group}))
		}
		copts := []client.NewContainerOpts{}
		if binary != "" {
			// As runtime/containerd does for crun (ociruntime.go): its
			// binary, and an ociVersion crun 1.8 takes.
			copts = append(copts, client.WithRuntime("io.containerd.runc.v2", &runcoptions.Options{BinaryName: binary}))
			opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
				s.Version = "1.1.0"
				return nil
			})
		}
		ctr, err := c.NewContainer(ctx, id, append(copts, client.WithNewSpec(opts...))...)
		if err != nil {
			return err
		}
		task, err := ctr.NewTask(ctx, cio.NullIO)
		if err != nil {
			ctr.Delete(ctx)
			return err
		}
		if !start {
			return nil
		}
		defer ctr.Delete(ctx)
		return runToExit(ctx, task)
	}
	// containerd and everything it forks (shims, runc) in a cpuacct
	// cgroup of their own: CPU per container, whatever else runs here.
	usage := containerdCPU(b, addr)
	var round atomic.Int64
	crun := ""
	if containerdtest.MissingCrun() == "" {
		crun = containerdtest.Crun()
	}
	for _, mode := range []string{"own", "grouped", "crun", "crun-grouped", "crun-grouped-robind"} {
		b.Run(mode, func(b *testing.B) {
			const workers = 8
			binary := ""
			if strings.HasPrefix(mode, "crun") {
				if crun == "" {
					b.Skipf("SKIPPED: %s", containerdtest.MissingCrun())
				}
				binary = crun
			}
			if strings.HasSuffix(mode, "-robind") {
				real, err := filepath.EvalSymlinks(crun)
				if err != nil {
					b.Fatal(err)
				}
				bound, why := containerd.ReadOnlyOCI(addr, real)
				if bound == "" {
					b.Skipf("SKIPPED: no read-only bind of %s: %s", real, why)
				}
				binary = bound
			}
			grouped := strings.Contains(mode, "grouped")
			r := round.Add(1)
			if grouped {
				for w := range workers {
					id := fmt.Sprintf("anchor-%d-%d", r, w)
					if err := run(id, fmt.Sprintf("g-%d-%d", r, w), binary, false); err != nil {
						b.Fatal(err)
					}
					defer func() {
						if ctr, err := c.LoadContainer(ctx, id); err == nil {
							if t, err := ctr.Task(ctx, nil); err == nil {
								t.Delete(ctx)
							}
							ctr.Delete(ctx)
						}
					}()
				}
			}
			b.ResetTimer()
			cpu0 := usage()
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						g := ""
						if grouped {
							g = fmt.Sprintf("g-%d-%d", r, w)
						}
						if err := run(fmt.Sprintf("%s-%d-%d", mode, r, i), g, binary, true); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "containers/s")
			b.ReportMetric(float64((usage()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/container")
		})
	}
}
