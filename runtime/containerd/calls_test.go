package containerd_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"google.golang.org/grpc"

	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// callLog records the containerd methods a runtime calls, in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) opt() client.Opt {
	return client.WithExtraDialOpts([]grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			l.mu.Lock()
			l.calls = append(l.calls, method[strings.LastIndexByte(method[:strings.LastIndexByte(method, '/')], '.')+1:])
			l.mu.Unlock()
			return invoker(ctx, method, req, reply, cc, opts...)
		})})
}

// take returns the calls since the last take.
func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

// TestHostJobCalls: a host-root job's container is made, run and deleted
// with the calls its life needs and no more: no lease (a lease keeps what
// a container's creation makes, an image's snapshot, from the garbage
// collector until the record names it; a host-root container makes
// nothing, and the lease's create and delete are two writes of
// containerd's metadata database per job, each with its fsync) and no
// lookup of the record (client.Container's NewTask reads it twice for a
// snapshot's mounts, the delete once). An image job's container still
// gets its lease (its snapshot needs it) and the job runs.
func TestHostJobCalls(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	ctx := context.Background()
	var log callLog
	rt, err := containerd.NewWithClientOpts(ctx, containerd.Options{Address: addr}, log.opt())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	dir := jobDir(t)
	cfg := hostTask(t, dir, "/bin/true")
	log.take()
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got, want := log.take(), []string{"Containers/Create", "Tasks/Create", "Tasks/Start"}; !slices.Equal(got, want) {
		t.Errorf("a host-root job's start called containerd's\n  %v\nwant\n  %v", got, want)
	}
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Fatalf("exit %+v, want 0", es)
	}
	// Wait's own calls are not this test's: where the cgroup has no
	// memory controller to read an OOM kill from, it reads the spec.
	log.take()
	if err := rt.Delete(ctx, cfg.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got, want := log.take(), []string{"Tasks/Delete", "Containers/Delete"}; !slices.Equal(got, want) {
		t.Errorf("a host-root job's delete called containerd's\n  %v\nwant\n  %v", got, want)
	}
	if _, err := rt.Wait(ctx, cfg.ID); err == nil {
		t.Errorf("Wait after Delete found the task still")
	}
	if infos, err := rt.List(ctx); err != nil || len(infos) != 0 {
		t.Errorf("List after Delete: %v, %v; want nothing", infos, err)
	}

	const ref = "docker.io/gpud/busybox:calls"
	var archive bytes.Buffer
	if err := containerd.WriteBusyboxImage(&archive, "/bin/busybox", ref); err != nil {
		t.Skipf("SKIPPED (the image half): no static busybox to build an image from: %v", err)
	}
	if _, err := rt.ImportImage(ctx, &archive); err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	img := hostTask(t, dir, "true")
	img.ID += "-image"
	img.Image = ref
	img.Env = nil
	log.take()
	if err := rt.Start(ctx, img); err != nil {
		t.Fatalf("Start (image): %v", err)
	}
	if got := log.take(); !slices.Contains(got, "Leases/Create") || !slices.Contains(got, "Leases/Delete") {
		t.Errorf("an image job's create called %v; want its container made under a lease", got)
	}
	if es := wait(t, rt, img.ID); es.Code != 0 {
		t.Errorf("image job exit %+v, want 0", es)
	}
	if err := rt.Delete(ctx, img.ID); err != nil {
		t.Fatalf("Delete (image): %v", err)
	}
}
