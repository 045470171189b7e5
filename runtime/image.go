package runtime

import (
	"context"
	"errors"
	"time"
)

// Errors of PullImage, one per thing a user does something different
// about; the runtime wraps them with the registry's own words.
var (
	// ErrImageNotFound: the registry has no such repository or tag.
	ErrImageNotFound = errors.New("image not found")
	// ErrImageDenied: the registry refused the credentials (or their
	// absence) for this repository.
	ErrImageDenied = errors.New("image pull denied")
	// ErrImageNoSpace: the node's image store ran out of disk.
	ErrImageNoSpace = errors.New("no space left for image")
	// ErrRegistryUnreachable: no registry (nor mirror) answered.
	ErrRegistryUnreachable = errors.New("registry unreachable")
)

// Credentials answers a registry host ("nvcr.io", "127.0.0.1:5000") with
// the user name and secret to present there; "" and "" when there are
// none (anonymous). It is called only while a pull runs and its answer is
// never stored.
type Credentials func(host string) (user, secret string, err error)

// PullRequest is one user's request for an image on this node.
type PullRequest struct {
	// Ref is an OCI reference (host/repo:tag or @digest; a name without
	// a host is Docker Hub's).
	Ref string
	// Credentials are the requesting user's (nil: anonymous). The image
	// is resolved with them even when the node holds it, so a cached copy
	// serves only users the registry would serve.
	Credentials Credentials
	// Progress, when set, receives byte counts while layers download.
	Progress func(PullProgress)
}

// PullProgress is how far a pull is.
type PullProgress struct {
	// Done and Total are bytes of the image's blobs; Total is 0 until
	// the manifest is read.
	Done, Total int64
}

// PullResult is what PullImage did.
type PullResult struct {
	// Ref is the normalised reference the image is stored under (what
	// TaskConfig.Image should name).
	Ref string
	// Digest is the manifest's digest.
	Digest string
	// Cached is true when the node already held the image (no download).
	Cached bool
	// Bytes were downloaded for this request (0 when cached or when it
	// joined a pull of another request).
	Bytes int64
	// Duration is how long the request took, resolve included.
	Duration time.Duration
}

// CachedImage is one image of the node's cache.
type CachedImage struct {
	Ref    string
	Digest string
	// Size is the image's bytes on disk (content and unpacked layers).
	Size     int64
	LastUsed time.Time
	// InUse is true while a container runs from it: never evicted.
	InUse bool
}

// ImagePuller is implemented by runtimes that pull images from OCI
// registries into a node-wide cache. It is optional, like UsageReader.
type ImagePuller interface {
	// PullImage makes req.Ref available to Start for req's user: it
	// resolves the reference with the user's credentials, and downloads
	// and unpacks it unless the node holds that digest. Concurrent
	// requests for one image share one download. A failed download is
	// retried and never leaves a usable but incomplete image. Errors
	// wrap ErrImageNotFound, ErrImageDenied, ErrImageNoSpace or
	// ErrRegistryUnreachable where one applies.
	PullImage(ctx context.Context, req PullRequest) (PullResult, error)
	// CachedImages lists the images pulled into the node's cache.
	CachedImages(ctx context.Context) ([]CachedImage, error)
}
