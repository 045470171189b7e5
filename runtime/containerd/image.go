package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	goruntime "runtime"

	"github.com/containerd/containerd/v2/client"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispecv1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// busyboxApplets are linked to busybox in the image: enough for job scripts
// and tests (a shell is required by the output wrapper).
var busyboxApplets = []string{"sh", "cat", "echo", "env", "head", "id", "ls", "sleep", "tail", "test", "true", "false", "hostname"}

// WriteBusyboxImage writes an OCI image layout tar named ref to w: one
// uncompressed layer with the static busybox binary at /bin/busybox and its
// applets as symlinks. It lets tests (and `--image` on nodes without a
// registry) run a non-host image; import it with ImportImage or
// `ctr -n gpud images import`.
func WriteBusyboxImage(w io.Writer, busyboxPath, ref string) error {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, d := range []string{"bin/", "etc/", "tmp/", "dev/", "proc/", "sys/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}); err != nil {
			return fmt.Errorf("build busybox image: %w", err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}
	if _, err := tw.Write(bin); err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}
	for _, a := range busyboxApplets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}); err != nil {
			return fmt.Errorf("build busybox image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}

	platform := ocispecv1.Platform{OS: "linux", Architecture: goruntime.GOARCH}
	layerDesc := blobDesc(ocispecv1.MediaTypeImageLayer, layer.Bytes())
	config, err := json.Marshal(ocispecv1.Image{
		Platform: platform,
		Config:   ocispecv1.ImageConfig{Env: []string{"PATH=/bin"}, WorkingDir: "/"},
		RootFS:   ocispecv1.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	if err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}
	configDesc := blobDesc(ocispecv1.MediaTypeImageConfig, config)
	manifest, err := json.Marshal(ocispecv1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispecv1.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispecv1.Descriptor{layerDesc},
	})
	if err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}
	manifestDesc := blobDesc(ocispecv1.MediaTypeImageManifest, manifest)
	manifestDesc.Platform = &platform
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":  ref,
		ocispecv1.AnnotationRefName: ref,
	}
	index, err := json.Marshal(ocispecv1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispecv1.MediaTypeImageIndex,
		Manifests: []ocispecv1.Descriptor{manifestDesc},
	})
	if err != nil {
		return fmt.Errorf("build busybox image: %w", err)
	}

	out := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{ocispecv1.ImageLayoutFile, []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer.Bytes()},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
	}
	for _, f := range files {
		if err := out.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return fmt.Errorf("write busybox image: %w", err)
		}
		if _, err := out.Write(f.data); err != nil {
			return fmt.Errorf("write busybox image: %w", err)
		}
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write busybox image: %w", err)
	}
	return nil
}

func blobDesc(mediaType string, b []byte) ocispecv1.Descriptor {
	sum := sha256.Sum256(b)
	return ocispecv1.Descriptor{MediaType: mediaType, Digest: digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum[:])), Size: int64(len(b))}
}

func blobPath(d ocispecv1.Descriptor) string {
	return "blobs/" + d.Digest.Algorithm().String() + "/" + d.Digest.Encoded()
}

// ImportImage imports an OCI or docker image archive into the runtime's
// namespace (containerd's classic import, which 1.6 daemons serve) and
// returns the names of the images it created.
func (r *Runtime) ImportImage(ctx context.Context, archive io.Reader) ([]string, error) {
	imgs, err := r.client.Import(r.nsCtx(ctx), archive, client.WithSkipMissing())
	if err != nil {
		return nil, fmt.Errorf("import image archive into namespace %s: %w", r.ns, err)
	}
	names := make([]string, 0, len(imgs))
	for _, img := range imgs {
		names = append(names, img.Name)
	}
	return names, nil
}
