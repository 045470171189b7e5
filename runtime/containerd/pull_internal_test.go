package containerd

import (
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
)

// TestIngestDigest: an open ingest is matched to its blob by Expected
// where the store says it, else by the digest that ends the ref the
// pull's fetch gave it (a daemon's local store lists no Expected), so a
// layer's progress counts while it downloads, not only once it is whole.
func TestIngestDigest(t *testing.T) {
	const d = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	for _, tc := range []struct {
		st   content.Status
		want string
	}{
		{content.Status{Ref: "layer-" + d}, d},
		{content.Status{Ref: "manifest-" + d}, d},
		{content.Status{Ref: "config-" + d}, d},
		{content.Status{Ref: "manifest-docker.io/library/app:1@" + d}, d},
		{content.Status{Ref: "whatever", Expected: digest.Digest(d)}, d},
		{content.Status{Ref: "push-tmp-1234"}, ""},
		{content.Status{Ref: ""}, ""},
	} {
		if got := ingestDigest(tc.st); got != tc.want {
			t.Errorf("ingestDigest(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}
