package registrytest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispecv1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// File is one entry of a layer: a regular file (Data), a directory (Dir)
// or a symbolic link (Link).
type File struct {
	Name string
	Mode int64
	Data []byte
	Dir  bool
	Link string
}

// Layer is an uncompressed tar layer kept in a file: its digest is also
// its diff ID.
type Layer struct {
	Path   string
	Digest digest.Digest
	Size   int64
}

// busyboxApplets are the commands the test images offer.
var busyboxApplets = []string{"sh", "cat", "echo", "env", "head", "id", "ls", "sleep", "tail", "test", "true", "false",
	"hostname", "pwd", "touch", "mkdir", "rm", "wc", "grep", "stat", "dd"}

// BusyboxFiles is a root filesystem of Debian's static busybox with its
// applets: enough for a shell and the tests' commands.
func BusyboxFiles(t testing.TB) []File {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is needed to build test images: %v", err)
	}
	files := []File{{Name: "bin", Dir: true, Mode: 0o755}, {Name: "etc", Dir: true, Mode: 0o755}, {Name: "tmp", Dir: true, Mode: 0o1777},
		{Name: "dev", Dir: true, Mode: 0o755}, {Name: "proc", Dir: true, Mode: 0o755}, {Name: "sys", Dir: true, Mode: 0o755},
		{Name: "root", Dir: true, Mode: 0o700}, {Name: "bin/busybox", Mode: 0o755, Data: bin}}
	for _, a := range busyboxApplets {
		files = append(files, File{Name: "bin/" + a, Link: "busybox", Mode: 0o777})
	}
	return files
}

// FilesLayer writes files as a layer under dir.
func FilesLayer(t testing.TB, dir string, files []File) Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Typeflag: tar.TypeReg, Size: int64(len(f.Data))}
		switch {
		case f.Dir:
			h.Typeflag, h.Name, h.Size = tar.TypeDir, strings.TrimSuffix(f.Name, "/")+"/", 0
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f.Link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("layer: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				t.Fatalf("layer: %v", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("layer: %v", err)
	}
	return writeLayer(t, dir, func(w io.Writer) error { _, err := w.Write(b.Bytes()); return err })
}

// RandomLayer writes a layer of one file, /data/<name>, of size random
// (incompressible) bytes from seed: what a big image's weights or
// libraries cost a pull, generated rather than committed.
func RandomLayer(t testing.TB, dir, name string, size int64, seed uint64) Layer {
	t.Helper()
	return writeLayer(t, dir, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		if err := tw.WriteHeader(&tar.Header{Name: "data/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: "data/" + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			return err
		}
		src := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), 'g', 'p', 'u', 'd'})
		if _, err := io.CopyN(tw, src, size); err != nil {
			return err
		}
		return tw.Close()
	})
}

func writeLayer(t testing.TB, dir string, write func(io.Writer) error) Layer {
	t.Helper()
	f, err := os.CreateTemp(dir, "layer")
	if err != nil {
		t.Fatalf("layer file: %v", err)
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := write(cw); err != nil {
		t.Fatalf("write layer: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("write layer: %v", err)
	}
	return Layer{Path: f.Name(), Digest: digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil))), Size: cw.n}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Config is what an image's configuration says about how it runs.
type Config struct {
	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
}

// Image is a pushed image.
type Image struct {
	// Ref is host/repo:tag.
	Ref string
	// Digest is the manifest's digest.
	Digest digest.Digest
	// ConfigDigest is the configuration blob's digest: the registry
	// serves it once per pull, so counting its GETs counts pulls.
	ConfigDigest digest.Digest
	// Size is the manifest's, the config's and every layer's bytes.
	Size int64
}

// Push uploads the layers, a configuration and a manifest as repoTag
// ("test/app:1"), with the first user's credentials.
func (r *Registry) Push(t testing.TB, repoTag string, cfg Config, layers ...Layer) Image {
	t.Helper()
	ctx := context.Background()
	repo, tag, ok := strings.Cut(repoTag, ":")
	if !ok {
		t.Fatalf("push %s: want repo:tag", repoTag)
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	diffs := make([]digest.Digest, len(layers))
	descs := make([]ocispecv1.Descriptor, len(layers))
	size := int64(0)
	for i, l := range layers {
		diffs[i] = l.Digest
		descs[i] = ocispecv1.Descriptor{MediaType: ocispecv1.MediaTypeImageLayer, Digest: l.Digest, Size: l.Size}
		f, err := os.Open(l.Path)
		if err != nil {
			t.Fatalf("push %s: %v", repoTag, err)
		}
		err = r.pushBlob(ctx, repo, l.Digest, f, l.Size)
		f.Close()
		if err != nil {
			t.Fatalf("push %s: layer %s: %v", repoTag, l.Digest, err)
		}
		size += l.Size
	}
	config, err := json.Marshal(ocispecv1.Image{
		Platform: ocispecv1.Platform{OS: "linux", Architecture: goruntime.GOARCH},
		Config:   ocispecv1.ImageConfig{Env: cfg.Env, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, WorkingDir: cfg.WorkingDir},
		RootFS:   ocispecv1.RootFS{Type: "layers", DiffIDs: diffs},
	})
	if err != nil {
		t.Fatal(err)
	}
	configDigest := digest.FromBytes(config)
	if err := r.pushBlob(ctx, repo, configDigest, bytes.NewReader(config), int64(len(config))); err != nil {
		t.Fatalf("push %s: config: %v", repoTag, err)
	}
	manifest, err := json.Marshal(ocispecv1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispecv1.MediaTypeImageManifest,
		Config:    ocispecv1.Descriptor{MediaType: ocispecv1.MediaTypeImageConfig, Digest: configDigest, Size: int64(len(config))},
		Layers:    descs,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.do(ctx, http.MethodPut, fmt.Sprintf("https://%s/v2/%s/manifests/%s", r.Host, repo, tag), bytes.NewReader(manifest),
		int64(len(manifest)), http.Header{"Content-Type": {ocispecv1.MediaTypeImageManifest}})
	if err != nil {
		t.Fatalf("push %s: manifest: %v", repoTag, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push %s: manifest: %s: %s", repoTag, resp.Status, body)
	}
	return Image{Ref: r.Ref(repoTag), Digest: digest.FromBytes(manifest), ConfigDigest: configDigest,
		Size: size + int64(len(config)) + int64(len(manifest))}
}

// pushBlob uploads one blob unless the registry has it (a monolithic
// upload: POST for a location, PUT with the digest).
func (r *Registry) pushBlob(ctx context.Context, repo string, d digest.Digest, body io.Reader, size int64) error {
	resp, err := r.do(ctx, http.MethodHead, fmt.Sprintf("https://%s/v2/%s/blobs/%s", r.Host, repo, d), nil, 0, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	resp, err = r.do(ctx, http.MethodPost, fmt.Sprintf("https://%s/v2/%s/blobs/uploads/", r.Host, repo), nil, 0, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("start upload: %s", resp.Status)
	}
	loc, err := resp.Location()
	if err != nil {
		return fmt.Errorf("start upload: %w", err)
	}
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	resp, err = r.do(ctx, http.MethodPut, loc.String(), body, size, http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("upload: %s: %s", resp.Status, msg)
	}
	return nil
}

// AppImage pushes the tests' usual image as repoTag: busybox and an
// /etc/os-release that names the image (so a job can tell it runs in it),
// in two layers.
func (r *Registry) AppImage(t testing.TB, repoTag string) Image {
	t.Helper()
	dir := t.TempDir()
	base := FilesLayer(t, dir, BusyboxFiles(t))
	app := FilesLayer(t, dir, []File{{Name: "etc", Dir: true, Mode: 0o755},
		{Name: "etc/os-release", Mode: 0o644, Data: fmt.Appendf(nil, "NAME=\"gpud test image\"\nID=gpudtest\nIMAGE=%q\n", repoTag)},
		{Name: "work", Dir: true, Mode: 0o1777}})
	return r.Push(t, repoTag, Config{WorkingDir: "/"}, base, app)
}

// BigImage pushes a multi-layer image of about size bytes: busybox and
// layers of random data of at most 128 MiB each, written under dir (the
// caller keeps or removes it).
func (r *Registry) BigImage(t testing.TB, dir, repoTag string, size int64) Image {
	t.Helper()
	layers := []Layer{FilesLayer(t, dir, BusyboxFiles(t))}
	const per = 128 << 20
	for i := 0; size > 0; i++ {
		n := min(size, per)
		layers = append(layers, RandomLayer(t, dir, fmt.Sprintf("blob%02d", i), n, uint64(i)+1))
		size -= n
	}
	img := r.Push(t, repoTag, Config{}, layers...)
	for _, l := range layers {
		os.Remove(l.Path)
	}
	return img
}

// Tag gives img's manifest one more tag in its repository: the same
// image under another name (its blobs are not uploaded again), for a
// test that needs a name no cache has seen.
func (r *Registry) Tag(t testing.TB, img Image, tag string) Image {
	t.Helper()
	ctx := context.Background()
	repoTag := strings.TrimPrefix(img.Ref, r.Host+"/")
	i := strings.LastIndexByte(repoTag, ':')
	if repoTag == img.Ref || i < 0 {
		t.Fatalf("tag %s: not an image of registry %s", img.Ref, r.Host)
	}
	repo := repoTag[:i]
	resp, err := r.do(ctx, http.MethodGet, fmt.Sprintf("https://%s/v2/%s/manifests/%s", r.Host, repo, img.Digest), nil, 0,
		http.Header{"Accept": {ocispecv1.MediaTypeImageManifest}})
	if err != nil {
		t.Fatalf("tag %s: get manifest: %v", img.Ref, err)
	}
	manifest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || digest.FromBytes(manifest) != img.Digest {
		t.Fatalf("tag %s: get manifest: %s, %v (%d bytes)", img.Ref, resp.Status, err, len(manifest))
	}
	resp, err = r.do(ctx, http.MethodPut, fmt.Sprintf("https://%s/v2/%s/manifests/%s", r.Host, repo, tag), bytes.NewReader(manifest),
		int64(len(manifest)), http.Header{"Content-Type": {ocispecv1.MediaTypeImageManifest}})
	if err != nil {
		t.Fatalf("tag %s as %s: %v", img.Ref, tag, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("tag %s as %s: %s: %s", img.Ref, tag, resp.Status, body)
	}
	img.Ref = r.Ref(repo + ":" + tag)
	return img
}
