package containerd

// Pulls from OCI registries into the node's one image cache.
//
// The pull is containerd's own client-side pull (client.Pull with its
// unpacker), the one that works against Debian's containerd 1.6, which has
// no Transfer API: the client resolves and fetches from the registry and
// writes the blobs into the daemon's content store over gRPC, and the
// unpacker applies each layer through the daemon's diff service as soon as
// it and the layers below it are in. Layers download in parallel
// (MaxConcurrentDownloads) and large ones in parallel ranges
// (ConcurrentLayerFetchBuffer), so unpacking overlaps downloading. That is
// what `ctr image pull` on 1.6 does not do (it fetches everything, then
// unpacks layer by layer), and it is measured against it by
// `make bench-images`. go-containerregistry would fetch the same way but
// then has to feed the daemon's content store itself; containerd's client
// already does, and keeps the image record, leases and GC right.
//
// Correctness rules:
//   - One cached copy per node: images live once in the runtime's
//     namespace, and concurrent requests for one image digest share one
//     download (flights).
//   - Every request resolves the reference with its own user's
//     credentials, even when the image is cached: a cached copy serves only
//     users the registry would serve. Resolvers (and so authorizers and
//     their tokens) are per request; credentials are never stored.
//   - The image record is created only after every blob is in and every
//     layer unpacked (client.Pull), under a lease: a pull cut off half-way
//     leaves no image, only ingests that the retry resumes and GC reclaims.
//   - The cache is bounded (ImageOptions.CacheBytes): after a pull the
//     least recently used images are deleted, never one a container uses
//     or one used within evictGrace.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	remoteerrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispecv1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/gpud/gpud/runtime"
)

// Image labels of the cache.
const (
	// labelPulled marks an image this runtime pulled (cache-managed);
	// images imported by hand are used as they are and never evicted.
	labelPulled = "gpud.image.pulled"
	// labelLastUsed is the RFC 3339 time a request last used the image.
	labelLastUsed = "gpud.image.lastused"
	// labelSize is the image's bytes on disk, measured after its pull.
	labelSize = "gpud.image.size"
)

// ImageOptions configure pulls from registries (Options.Images).
type ImageOptions struct {
	// CacheBytes bounds the pulled images' bytes on disk (0: unbounded).
	CacheBytes int64
	// Mirrors lists, per registry host ("docker.io", "nvcr.io"), mirror
	// URLs (https://host[:port]) tried before it, in order.
	Mirrors map[string][]string
	// CAFile adds a site CA (PEM) to the system roots for registries.
	CAFile string
	// Downloads is the number of layers fetched at once (default 8).
	Downloads int
	// Tries is how often a download that failed for a reason other than
	// not found, denied or a full disk is tried (default 3).
	Tries int
	// RetryWait is the wait before the second try, doubling after
	// (default 1s).
	RetryWait time.Duration
	// KeepRecent keeps an image used this recently from eviction, since
	// its container may not exist yet (default 2m).
	KeepRecent time.Duration
}

// imageCache is the runtime's cache state: its flights and HTTP transport.
type imageCache struct {
	opts      ImageOptions
	transport *http.Transport
	mu        sync.Mutex
	flights   map[string]*flight
}

// flight is one download that several requests wait for.
type flight struct {
	done     chan struct{}
	err      error
	bytes    int64
	mu       sync.Mutex
	watchers []func(runtime.PullProgress)
}

func (f *flight) watch(fn func(runtime.PullProgress)) {
	if fn == nil {
		return
	}
	f.mu.Lock()
	f.watchers = append(f.watchers, fn)
	f.mu.Unlock()
}

func (f *flight) progress(p runtime.PullProgress) {
	f.mu.Lock()
	ws := slices.Clone(f.watchers)
	f.mu.Unlock()
	for _, w := range ws {
		w(p)
	}
}

func newImageCache(opts ImageOptions) (*imageCache, error) {
	if opts.Downloads <= 0 {
		opts.Downloads = 8
	}
	if opts.Tries <= 0 {
		opts.Tries = 3
	}
	if opts.RetryWait <= 0 {
		opts.RetryWait = time.Second
	}
	if opts.KeepRecent <= 0 {
		opts.KeepRecent = 2 * time.Minute
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read registry CA file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("registry CA file %s holds no PEM certificate", opts.CAFile)
		}
	}
	for host, ms := range opts.Mirrors {
		for _, m := range ms {
			if _, err := mirrorHost(m); err != nil {
				return nil, fmt.Errorf("mirror %q of %s: %w", m, host, err)
			}
		}
	}
	// One transport for every user: connections are shared, credentials
	// are not (each request's resolver authorizes its own requests).
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &imageCache{opts: opts, transport: tr, flights: map[string]*flight{}}, nil
}

// mirrorHost checks a mirror URL and returns its scheme and host.
func mirrorHost(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, errors.New("want https://host[:port]")
	}
	return u, nil
}

// resolver is a request's own: its authorizer answers with creds only.
func (c *imageCache) resolver(creds runtime.Credentials) remotes.Resolver {
	httpc := &http.Client{Transport: c.transport}
	credFn := func(host string) (string, string, error) {
		if creds == nil {
			return "", "", nil
		}
		return creds(host)
	}
	hosts := func(host string) ([]docker.RegistryHost, error) {
		auth := docker.NewDockerAuthorizer(docker.WithAuthClient(httpc), docker.WithAuthCreds(credFn))
		var out []docker.RegistryHost
		for _, m := range c.opts.Mirrors[host] {
			u, _ := mirrorHost(m)
			path := strings.TrimSuffix(u.Path, "/")
			if path == "" {
				path = "/v2"
			}
			out = append(out, docker.RegistryHost{Client: httpc, Authorizer: auth, Host: u.Host, Scheme: u.Scheme, Path: path,
				Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve})
		}
		h := host
		if h == "docker.io" {
			h = "registry-1.docker.io"
		}
		return append(out, docker.RegistryHost{Client: httpc, Authorizer: auth, Host: h, Scheme: "https", Path: "/v2",
			Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve}), nil
	}
	return docker.NewResolver(docker.ResolverOptions{Hosts: hosts})
}

// NormalizeRef is ref as the cache stores it: host/repo:tag, Docker Hub's
// names made explicit ("busybox" is docker.io/library/busybox:latest).
func NormalizeRef(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return named.String(), nil
}

var _ runtime.ImagePuller = (*Runtime)(nil)

// PullImage implements runtime.ImagePuller.
func (r *Runtime) PullImage(ctx context.Context, req runtime.PullRequest) (runtime.PullResult, error) {
	start := time.Now()
	ctx = r.nsCtx(ctx)
	is := r.client.ImageService()
	// An image put into the store by hand (ctr images import) under this
	// very name is the site's: used as it is, no registry asked.
	if img, err := is.Get(ctx, req.Ref); err == nil && img.Labels[labelPulled] == "" {
		return runtime.PullResult{Ref: img.Name, Digest: img.Target.Digest.String(), Cached: true, Duration: time.Since(start)}, nil
	}
	ref, err := NormalizeRef(req.Ref)
	if err != nil {
		return runtime.PullResult{}, fmt.Errorf("%w: %w", runtime.ErrImageNotFound, err)
	}
	if img, err := is.Get(ctx, ref); err == nil && img.Labels[labelPulled] == "" {
		return runtime.PullResult{Ref: img.Name, Digest: img.Target.Digest.String(), Cached: true, Duration: time.Since(start)}, nil
	}
	res := runtime.PullResult{Ref: ref}
	resolver := r.images.resolver(req.Credentials)
	_, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		return res, pullError(ref, err)
	}
	res.Digest = desc.Digest.String()
	if img, err := is.Get(ctx, ref); err == nil && img.Target.Digest == desc.Digest {
		if ok, err := client.NewImage(r.client, img).IsUnpacked(ctx, Snapshotter); err == nil && ok {
			r.touch(ctx, img)
			res.Cached, res.Duration = true, time.Since(start)
			return res, nil
		}
	}
	key := ref + "@" + desc.Digest.String()
	r.images.mu.Lock()
	f, joined := r.images.flights[key]
	if !joined {
		f = &flight{done: make(chan struct{})}
		r.images.flights[key] = f
	}
	f.watch(req.Progress)
	r.images.mu.Unlock()
	if !joined {
		// The download belongs to no one request: a cancelled job leaves
		// it to finish for the others (and for the next job).
		go func() {
			f.bytes, f.err = r.download(context.WithoutCancel(ctx), ref, resolver, f)
			r.images.mu.Lock()
			delete(r.images.flights, key)
			r.images.mu.Unlock()
			if f.err == nil {
				// Before the waiters go on: the bound holds when they do.
				r.evict(context.WithoutCancel(ctx), ref)
			}
			close(f.done)
		}()
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return res, fmt.Errorf("pull image %s: %w", ref, ctx.Err())
	}
	if f.err != nil {
		return res, f.err
	}
	if !joined {
		res.Bytes = f.bytes
	}
	res.Duration = time.Since(start)
	return res, nil
}

// download pulls ref, trying again after errors that another try may
// mend, and returns the bytes fetched.
func (r *Runtime) download(ctx context.Context, ref string, resolver remotes.Resolver, f *flight) (int64, error) {
	wait := r.images.opts.RetryWait
	var total int64
	for try := 1; ; try++ {
		n, err := r.pullOnce(ctx, ref, resolver, f)
		total += n
		if err == nil {
			return total, nil
		}
		err = pullError(ref, err)
		if try >= r.images.opts.Tries || errors.Is(err, runtime.ErrImageNotFound) || errors.Is(err, runtime.ErrImageDenied) ||
			errors.Is(err, runtime.ErrImageNoSpace) {
			if try > 1 {
				return total, fmt.Errorf("%w (after %d tries)", err, try)
			}
			return total, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return total, err
		}
		wait *= 2
	}
}

// pullOnce is one try of containerd's pull, with progress read from the
// content store's ingests.
func (r *Runtime) pullOnce(ctx context.Context, ref string, resolver remotes.Resolver, f *flight) (int64, error) {
	cs := r.client.ContentStore()
	var mu sync.Mutex
	blobs := map[string]int64{} // digest → size, every blob of the image
	var fetched atomic.Int64    // bytes of blobs the store lacked
	account := images.HandlerFunc(func(ctx context.Context, desc ocispecv1.Descriptor) ([]ocispecv1.Descriptor, error) {
		mu.Lock()
		_, seen := blobs[desc.Digest.String()]
		blobs[desc.Digest.String()] = desc.Size
		mu.Unlock()
		if !seen {
			if _, err := cs.Info(ctx, desc.Digest); errdefs.IsNotFound(err) {
				fetched.Add(desc.Size)
			}
		}
		return nil, nil
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				f.progress(r.progress(ctx, &mu, blobs))
			}
		}
	}()
	img, err := r.client.Pull(ctx, ref,
		client.WithResolver(resolver),
		client.WithPullUnpack,
		client.WithPullSnapshotter(Snapshotter),
		client.WithImageHandler(account),
		client.WithMaxConcurrentDownloads(r.images.opts.Downloads),
		client.WithPullLabels(map[string]string{labelPulled: "1", labelLastUsed: time.Now().UTC().Format(time.RFC3339Nano)}),
	)
	close(stop)
	wg.Wait()
	if err != nil {
		return fetched.Load(), err
	}
	f.progress(r.progress(ctx, &mu, blobs))
	// The size is measured once here, so the inventory costs no walk.
	if n, err := img.Usage(ctx, client.WithSnapshotUsage()); err == nil {
		rec := img.Metadata()
		rec.Labels[labelSize] = strconv.FormatInt(n, 10)
		if _, err := r.client.ImageService().Update(ctx, rec, "labels."+labelSize); err != nil {
			return fetched.Load(), fmt.Errorf("label image %s: %w", ref, err)
		}
	}
	return fetched.Load(), nil
}

// progress sums the image's blobs: whole ones that are in the store, and
// how far the open ingests are.
func (r *Runtime) progress(ctx context.Context, mu *sync.Mutex, blobs map[string]int64) runtime.PullProgress {
	mu.Lock()
	sizes := make(map[string]int64, len(blobs))
	for k, v := range blobs {
		sizes[k] = v
	}
	mu.Unlock()
	cs := r.client.ContentStore()
	var p runtime.PullProgress
	open := map[string]int64{}
	if sts, err := cs.ListStatuses(ctx); err == nil {
		for _, s := range sts {
			if d := ingestDigest(s); d != "" {
				open[d] = s.Offset
			}
		}
	}
	for d, size := range sizes {
		p.Total += size
		if off, ok := open[d]; ok {
			p.Done += off
		} else if info, err := cs.Info(ctx, digest.Digest(d)); err == nil {
			p.Done += info.Size
		}
	}
	return p
}

// ingestDigest is the digest of the blob an open ingest writes: its
// Expected where the store says it, else the end of its ref, which the
// pull's fetch names "layer-sha256:…" (remotes.MakeRefKey). A daemon's
// local store (containerd 1.6's as 2.x's) lists ingests without Expected,
// so without the ref a blob's progress showed only once it was whole.
func ingestDigest(s content.Status) string {
	if s.Expected != "" {
		return s.Expected.String()
	}
	i := strings.LastIndexAny(s.Ref, "-@")
	d, err := digest.Parse(s.Ref[i+1:])
	if err != nil {
		return ""
	}
	return d.String()
}

// pullError wraps err with the runtime's kind of failure, saying what the
// user can do about it.
func pullError(ref string, err error) error {
	var status remoteerrors.ErrUnexpectedStatus
	switch {
	case errors.Is(err, docker.ErrInvalidAuthorization),
		errors.As(err, &status) && (status.StatusCode == http.StatusUnauthorized || status.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%w: %s: the registry refused your credentials, or you have none for it: %w", runtime.ErrImageDenied, ref, err)
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s: the registry has no such repository or tag: %w", runtime.ErrImageNotFound, ref, err)
	case errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device"):
		return fmt.Errorf("%w: %s: the node's image store is full: %w", runtime.ErrImageNoSpace, ref, err)
	case errors.Is(err, runtime.ErrImageDenied), errors.Is(err, runtime.ErrImageNotFound), errors.Is(err, runtime.ErrImageNoSpace),
		errors.Is(err, runtime.ErrRegistryUnreachable):
		return err
	}
	var nerr net.Error
	var operr *net.OpError
	if errors.As(err, &nerr) || errors.As(err, &operr) || strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%w: %s: %w", runtime.ErrRegistryUnreachable, ref, err)
	}
	return fmt.Errorf("pull image %s: %w", ref, err)
}

// touch records that a request used img now.
func (r *Runtime) touch(ctx context.Context, img images.Image) {
	if img.Labels == nil {
		img.Labels = map[string]string{}
	}
	img.Labels[labelLastUsed] = time.Now().UTC().Format(time.RFC3339Nano)
	// Best effort: a lost touch only makes the image older to eviction.
	_, _ = r.client.ImageService().Update(ctx, img, "labels."+labelLastUsed)
}

// CachedImages implements runtime.ImagePuller.
func (r *Runtime) CachedImages(ctx context.Context) ([]runtime.CachedImage, error) {
	ctx = r.nsCtx(ctx)
	imgs, err := r.client.ImageService().List(ctx, fmt.Sprintf("labels.%q", labelPulled))
	if err != nil {
		return nil, fmt.Errorf("list cached images: %w", err)
	}
	used, err := r.imagesInUse(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.CachedImage, 0, len(imgs))
	for _, img := range imgs {
		size, _ := strconv.ParseInt(img.Labels[labelSize], 10, 64)
		last, _ := time.Parse(time.RFC3339Nano, img.Labels[labelLastUsed])
		out = append(out, runtime.CachedImage{Ref: img.Name, Digest: img.Target.Digest.String(), Size: size, LastUsed: last, InUse: used[img.Name]})
	}
	slices.SortFunc(out, func(a, b runtime.CachedImage) int { return strings.Compare(a.Ref, b.Ref) })
	return out, nil
}

// imagesInUse names the images some container of the namespace runs from.
func (r *Runtime) imagesInUse(ctx context.Context) (map[string]bool, error) {
	cs, err := r.client.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		if c.Image != "" {
			used[c.Image] = true
		}
	}
	return used, nil
}

// evict deletes the least recently used pulled images until the cache
// fits CacheBytes, skipping images in use, in flight or used within
// KeepRecent, and keep (the image just pulled). Errors are left for the
// next pull to meet.
func (r *Runtime) evict(ctx context.Context, keep string) {
	limit := r.images.opts.CacheBytes
	if limit <= 0 {
		return
	}
	imgs, err := r.CachedImages(ctx)
	if err != nil {
		return
	}
	var total int64
	for _, img := range imgs {
		total += img.Size
	}
	slices.SortFunc(imgs, func(a, b runtime.CachedImage) int { return a.LastUsed.Compare(b.LastUsed) })
	r.images.mu.Lock()
	flying := map[string]bool{}
	for k := range r.images.flights {
		ref, _, _ := strings.Cut(k, "@")
		flying[ref] = true
	}
	r.images.mu.Unlock()
	ctx = r.nsCtx(ctx)
	for _, img := range imgs {
		if total <= limit {
			return
		}
		if img.InUse || img.Ref == keep || flying[img.Ref] || time.Since(img.LastUsed) < r.images.opts.KeepRecent {
			continue
		}
		if err := r.client.ImageService().Delete(ctx, img.Ref, images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
			continue
		}
		total -= img.Size
	}
}
