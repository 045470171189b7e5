package containerd_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
	"github.com/gpud/gpud/runtime/containerd/registrytest"
)

var alice = registrytest.User{Name: "alice", Password: "alice-secret"}

func creds(u registrytest.User) runtime.Credentials {
	return func(string) (string, string, error) { return u.Name, u.Password, nil }
}

// pullRuntime is a runtime on addr that trusts reg's CA (or caFile,
// where given).
func pullRuntime(t *testing.T, addr string, reg *registrytest.Registry, opts containerd.ImageOptions, caFile ...string) *containerd.Runtime {
	t.Helper()
	opts.CAFile = reg.CAFile
	if len(caFile) > 0 {
		opts.CAFile = caFile[0]
	}
	if opts.RetryWait == 0 {
		opts.RetryWait = 10 * time.Millisecond
	}
	rt, err := containerd.New(context.Background(), containerd.Options{Address: addr, Images: opts})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// runIn runs args in image ref and returns its stdout.
func runIn(t *testing.T, rt *containerd.Runtime, id, ref string, args ...string) string {
	t.Helper()
	cfg := hostTask(t, jobDir(t), args...)
	cfg.ID, cfg.Image, cfg.Env = id, ref, nil
	if err := rt.Start(context.Background(), cfg); err != nil {
		t.Fatalf("Start in %s: %v", ref, err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), cfg.ID) })
	if es := wait(t, rt, cfg.ID); es.Code != 0 {
		t.Fatalf("exit %+v in %s (stderr %q)", es, ref, readFile(t, cfg.StderrPath))
	}
	return readFile(t, cfg.StdoutPath)
}

// TestPullFromRegistryThenCached: a pulled image runs, a second request
// finds it cached without downloading (the registry served its config
// once), and it is in the node's inventory with its size.
func TestPullFromRegistryThenCached(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, alice)
	img := reg.AppImage(t, "test/app:1")
	rt := pullRuntime(t, containerdtest.Start(t), reg, containerd.ImageOptions{})
	ctx := context.Background()

	var progress atomic.Int64
	res, err := rt.PullImage(ctx, runtime.PullRequest{Ref: img.Ref, Credentials: creds(alice),
		Progress: func(p runtime.PullProgress) { progress.Store(p.Done) }})
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	if res.Cached || res.Bytes < 1<<20 || res.Digest != img.Digest.String() || res.Ref != img.Ref {
		t.Fatalf("first pull = %+v, want a download of the image %s", res, img.Digest)
	}
	if progress.Load() != img.Size {
		t.Errorf("progress ended at %d bytes of %d", progress.Load(), img.Size)
	}
	if out := runIn(t, rt, testID(t), res.Ref, "cat", "/etc/os-release"); !strings.Contains(out, `IMAGE="test/app:1"`) {
		t.Fatalf("os-release in the pulled image = %q", out)
	}
	again, err := rt.PullImage(ctx, runtime.PullRequest{Ref: img.Ref, Credentials: creds(alice)})
	if err != nil || !again.Cached || again.Bytes != 0 {
		t.Fatalf("second pull = %+v, %v; want cached", again, err)
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the config %d times, want 1", n)
	}
	inv, err := rt.CachedImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) != 1 || inv[0].Ref != img.Ref || inv[0].Size < 1<<20 || inv[0].Digest != img.Digest.String() {
		t.Fatalf("inventory = %+v, want the one image with its size", inv)
	}
}

// TestPullRefusals: a cached image is not served to a request without
// (or with wrong) credentials; a missing tag says so.
func TestPullRefusals(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, alice)
	img := reg.AppImage(t, "test/app:1")
	rt := pullRuntime(t, containerdtest.Start(t), reg, containerd.ImageOptions{})
	ctx := context.Background()
	if _, err := rt.PullImage(ctx, runtime.PullRequest{Ref: img.Ref, Credentials: creds(alice)}); err != nil {
		t.Fatalf("PullImage as alice: %v", err)
	}
	for _, tc := range []struct {
		name  string
		ref   string
		creds runtime.Credentials
		want  error
	}{
		{"no credentials", img.Ref, nil, runtime.ErrImageDenied},
		{"wrong password", img.Ref, creds(registrytest.User{Name: "alice", Password: "guess"}), runtime.ErrImageDenied},
		{"another user", img.Ref, creds(registrytest.User{Name: "bob", Password: "alice-secret"}), runtime.ErrImageDenied},
		{"missing tag", reg.Ref("test/app:2"), creds(alice), runtime.ErrImageNotFound},
		{"missing repository", reg.Ref("test/none:1"), creds(alice), runtime.ErrImageNotFound},
	} {
		_, err := rt.PullImage(ctx, runtime.PullRequest{Ref: tc.ref, Credentials: tc.creds})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: PullImage = %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the config %d times, want 1", n)
	}
}

// TestConcurrentPullsShareOneDownload: eight requests for one new image at
// once make one download, counted in the registry's own log.
func TestConcurrentPullsShareOneDownload(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, alice)
	img := reg.AppImage(t, "test/app:1")
	rt := pullRuntime(t, containerdtest.Start(t), reg, containerd.ImageOptions{})
	var wg sync.WaitGroup
	var downloads atomic.Int32
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			res, err := rt.PullImage(context.Background(), runtime.PullRequest{Ref: img.Ref, Credentials: creds(alice)})
			if res.Bytes > 0 {
				downloads.Add(1)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("PullImage: %v", err)
		}
	}
	if got := reg.Requests("GET", img.ConfigDigest.String()); got != 1 {
		t.Errorf("registry served the config %d times for 8 concurrent requests, want 1", got)
	}
	if got := downloads.Load(); got != 1 {
		t.Errorf("%d requests report downloaded bytes, want 1", got)
	}
}

// cutProxy forwards TCP to target. After it has carried after bytes from
// the target, it cuts that connection; with dead set it then refuses every
// connection (a registry gone mid-pull), else it goes on forwarding (one
// cut, which containerd's fetcher resumes from where it was).
type cutProxy struct {
	ln    net.Listener
	after int64
	dead  bool
	n     atomic.Int64
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func startCutProxy(t *testing.T, target string, after int64, dead bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, after: after, dead: dead}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.dead && p.cut.Load() {
				c.Close()
				continue
			}
			wg.Go(func() { p.serve(c, target) })
		}
	})
	return p
}

func (p *cutProxy) serve(c net.Conn, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	defer c.Close()
	defer up.Close()
	go func() { io.Copy(up, c); up.Close() }()
	buf := make([]byte, 32<<10)
	for {
		k, err := up.Read(buf)
		if k > 0 {
			if p.n.Add(int64(k)) > p.after && !p.cut.Load() && p.cut.CompareAndSwap(false, true) {
				return // cut mid-transfer
			}
			if _, werr := c.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestPullCutMidwayRetriesAndNeverLeavesAPartialImage: a download cut
// off half-way goes on and the image runs; a registry gone half-way fails
// the pull after its tries and leaves no image behind.
func TestPullCutMidwayRetriesAndNeverLeavesAPartialImage(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, alice)
	reg.AppImage(t, "test/app:1")
	addr := containerdtest.Start(t)
	ctx := context.Background()

	// busybox is a ~1 MB layer: cut after 256 KiB.
	once := startCutProxy(t, reg.Host, 256<<10, false)
	ref := once.ln.Addr().String() + "/test/app:1"
	rt := pullRuntime(t, addr, reg, containerd.ImageOptions{Tries: 3})
	t0 := time.Now()
	res, err := rt.PullImage(ctx, runtime.PullRequest{Ref: ref, Credentials: creds(alice)})
	if err != nil {
		t.Fatalf("PullImage through a connection cut once: %v", err)
	}
	t.Logf("pull cut once: %v", time.Since(t0))
	if out := runIn(t, rt, testID(t), res.Ref, "cat", "/etc/os-release"); !strings.Contains(out, "gpud test image") {
		t.Fatalf("os-release after a retried pull = %q", out)
	}

	always := startCutProxy(t, reg.Host, 256<<10, true)
	ref2 := always.ln.Addr().String() + "/test/app:1"
	// A containerd of its own: the first one holds every blob by now.
	rt1 := pullRuntime(t, containerdtest.Start(t), reg, containerd.ImageOptions{Tries: 2})
	t0 = time.Now()
	_, err = rt1.PullImage(ctx, runtime.PullRequest{Ref: ref2, Credentials: creds(alice)})
	t.Logf("pull always cut: %v: %v", time.Since(t0), err)
	if err == nil || !strings.Contains(err.Error(), "after 2 tries") {
		t.Fatalf("PullImage through a connection always cut = %v, want a failure after 2 tries", err)
	}
	inv, err := rt1.CachedImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range inv {
		if img.Ref == ref2 {
			t.Fatalf("a failed pull left image %+v", img)
		}
	}
	cfg := hostTask(t, jobDir(t), "true")
	cfg.ID, cfg.Image = testID(t)+"-partial", ref2
	if err := rt1.Start(ctx, cfg); err == nil {
		rt1.Delete(ctx, cfg.ID)
		t.Fatal("a container started from an image whose pull failed")
	}
}

// TestCacheEvictsLeastRecentlyUsedNeverInUse: over its bound, the cache
// deletes the least recently used image, never one a container runs from,
// nor the one just pulled.
func TestCacheEvictsLeastRecentlyUsedNeverInUse(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, alice)
	a, b, c := reg.AppImage(t, "test/a:1"), reg.AppImage(t, "test/b:1"), reg.AppImage(t, "test/c:1")
	// Room for about two of them (busybox is shared but counted per image).
	rt := pullRuntime(t, containerdtest.Start(t), reg, containerd.ImageOptions{CacheBytes: 5 << 20, KeepRecent: time.Nanosecond})
	ctx := context.Background()
	pull := func(ref string) {
		t.Helper()
		if _, err := rt.PullImage(ctx, runtime.PullRequest{Ref: ref, Credentials: creds(alice)}); err != nil {
			t.Fatalf("PullImage %s: %v", ref, err)
		}
	}
	pull(a.Ref)
	cfg := hostTask(t, jobDir(t), "sleep", "60")
	cfg.Image, cfg.Env = a.Ref, nil
	if err := rt.Start(ctx, cfg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), cfg.ID) })
	pull(b.Ref)
	pull(c.Ref)
	var refs []string
	inv, err := rt.CachedImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range inv {
		refs = append(refs, img.Ref)
		t.Logf("cached: %+v", img)
		if img.Ref == a.Ref && !img.InUse {
			t.Errorf("image %s runs a container but is not in use: %+v", a.Ref, img)
		}
	}
	if strings.Join(refs, " ") != a.Ref+" "+c.Ref {
		t.Fatalf("cached after pulling a (in use), b, c over the bound: %v, want [%s %s]", refs, a.Ref, c.Ref)
	}
}

// TestPullThroughMirror: node.toml's mirrors of a registry are asked
// first, in order: a mirror that does not answer is passed over, an image
// the mirror holds comes from it (the registry is never asked for it),
// and one the mirror lacks comes from the registry itself. Each
// registry's own log counts what it served.
func TestPullThroughMirror(t *testing.T) {
	t.Parallel()
	origin, mirror := registrytest.Start(t, alice), registrytest.Start(t, alice)
	cached := mirror.AppImage(t, "test/mirrored:1")
	only := origin.AppImage(t, "test/origin-only:1")
	// Nothing listens on a port just closed: the first mirror is down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cas := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(cas, append(append([]byte{}, origin.CAPEM...), mirror.CAPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := containerd.ImageOptions{Mirrors: map[string][]string{origin.Host: {"https://" + dead, "https://" + mirror.Host}}}
	rt := pullRuntime(t, containerdtest.Start(t), origin, opts, cas)
	ctx := context.Background()

	res, err := rt.PullImage(ctx, runtime.PullRequest{Ref: origin.Ref("test/mirrored:1"), Credentials: creds(alice)})
	if err != nil || res.Digest != cached.Digest.String() {
		t.Fatalf("pull of an image only the mirror holds = %+v, %v; want %s from the mirror", res, err, cached.Digest)
	}
	if n := mirror.Requests("GET", cached.ConfigDigest.String()); n != 1 {
		t.Errorf("mirror served the config %d times, want 1", n)
	}
	if n := origin.Requests("GET", cached.ConfigDigest.String()); n != 0 {
		t.Errorf("registry served the mirrored image's config %d times, want 0", n)
	}
	if out := runIn(t, rt, testID(t), res.Ref, "cat", "/etc/os-release"); !strings.Contains(out, `IMAGE="test/mirrored:1"`) {
		t.Fatalf("os-release in the mirrored image = %q", out)
	}
	res, err = rt.PullImage(ctx, runtime.PullRequest{Ref: only.Ref, Credentials: creds(alice)})
	if err != nil || res.Digest != only.Digest.String() {
		t.Fatalf("pull of an image the mirror lacks = %+v, %v; want %s from the registry", res, err, only.Digest)
	}
	if n := origin.Requests("GET", only.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the config %d times, want 1 (the mirror lacks it)", n)
	}
}

// TestPullOntoAFullDiskFailsSayingSo: a node whose image store has no room
// for an image fails the pull at once (no retry) with the full-disk
// error, which says what is wrong, and keeps no image under the name. The
// store is a 48 MiB tmpfs; the image is 96 MiB.
func TestPullOntoAFullDiskFailsSayingSo(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, alice)
	img := reg.BigImage(t, t.TempDir(), "test/too-big:1", 96<<20)
	mnt, err := os.MkdirTemp("", "ctdfull")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=48m,mode=0755"); err != nil {
		os.Remove(mnt)
		t.Fatalf("mount a 48 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { // after the daemon's own cleanup (registered later, run first)
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
		os.Remove(mnt)
	})
	rt := pullRuntime(t, containerdtest.StartIn(t, mnt), reg, containerd.ImageOptions{Tries: 3})
	ctx := context.Background()

	_, err = rt.PullImage(ctx, runtime.PullRequest{Ref: img.Ref, Credentials: creds(alice)})
	if !errors.Is(err, runtime.ErrImageNoSpace) || !strings.Contains(err.Error(), "image store is full") {
		t.Fatalf("PullImage onto a full store = %v, want %v saying the store is full", err, runtime.ErrImageNoSpace)
	}
	if strings.Contains(err.Error(), "tries)") {
		t.Errorf("a full disk was tried again: %v", err)
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the config %d times, want 1 (no retry)", n)
	}
	inv, err := rt.CachedImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) != 0 {
		t.Errorf("inventory after the failed pull = %+v, want none", inv)
	}
}
