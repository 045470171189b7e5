package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
)

// ErrCorrupt is wrapped by every error that says a checkpoint does not match
// its manifest, or has none that can be read.
var ErrCorrupt = errors.New("checkpoint corrupt")

const (
	manifestVersion = 1
	// maxManifestBytes bounds what Verify reads: the job owns the files in
	// its checkpoint and could replace the manifest with something huge.
	// At about 150 bytes an entry this allows some 400,000 files.
	maxManifestBytes = 64 << 20
	// copyBufBytes is the read size while hashing; large reads matter more
	// than anything else for sealing throughput.
	copyBufBytes = 1 << 20
)

// manifest is MANIFEST.json in a sealed checkpoint. Paths are slash-separated
// and relative to the checkpoint directory.
type manifest struct {
	Version int        `json:"version"`
	JobID   spec.JobID `json:"job_id"`
	Seq     int        `json:"seq"`
	Created time.Time  `json:"created"`
	// Bytes is the sum of Files' sizes.
	Bytes int64          `json:"bytes"`
	Files []manifestFile `json:"files"`
	Links []manifestLink `json:"links,omitempty"`
}

type manifestFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Mode is the permission bits in octal ("0644"), for people reading the
	// manifest; Verify does not check them.
	Mode   string `json:"mode"`
	SHA256 string `json:"sha256"`
}

type manifestLink struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

func (m *manifest) checkpoint(dir string) Checkpoint {
	return Checkpoint{Seq: m.Seq, Dir: dir, Created: m.Created, Bytes: m.Bytes, Files: len(m.Files)}
}

// maxScanDepth bounds how deep a staging directory may nest (scan holds one
// descriptor per level).
const maxScanDepth = 256

// scan walks a staging directory, hashing and fsyncing every regular file
// and fsyncing every directory, and returns a manifest of its contents
// (without the header fields). The job owns the directory and may change it
// while gpud reads, so the walk goes through descriptors (safefs): it never
// follows a symlink (it records it), never opens anything but a directory
// or a regular file, and never blocks on a FIFO swapped in meanwhile.
func scan(dir string) (*manifest, error) {
	d, err := safefs.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	top, err := d.Stat()
	if err != nil {
		return nil, err
	}
	m := &manifest{Files: []manifestFile{}}
	if err := scanDir(d, ".", top.UID, m, make([]byte, copyBufBytes), 0); err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	return m, nil
}

// scanDir adds directory d (at rel in the checkpoint) to m, in lexical
// order, and fsyncs it after its entries. Regular files must belong to
// owner (the staging directory's, the job's uid): a hard link to someone
// else's file would otherwise have root hash it into the manifest.
func scanDir(d *safefs.Dir, rel string, owner uint32, m *manifest, buf []byte, depth int) error {
	if depth > maxScanDepth {
		return spec.Errorf(spec.ErrInvalid, "%s is nested deeper than %d directories; flatten the checkpoint", rel, maxScanDepth)
	}
	names, err := d.Names()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		p := path.Join(rel, n)
		st, err := d.Lstat(n)
		if err != nil {
			return err
		}
		switch {
		case st.IsDir():
			sub, err := d.OpenDir(n)
			if err != nil {
				return err
			}
			err = scanDir(sub, p, owner, m, buf, depth+1)
			sub.Close()
			if err != nil {
				return err
			}
		case st.IsRegular():
			if p == manifestName {
				return spec.Errorf(spec.ErrInvalid, "%s: the name %s is reserved for gpud's manifest; rename the file", p, manifestName)
			}
			f, err := d.OpenRegular(n)
			if err != nil {
				return notRegular(p, err)
			}
			if fi, err := f.Stat(); err != nil || fi.Sys().(*syscall.Stat_t).Uid != owner {
				f.Close()
				if err != nil {
					return err
				}
				return spec.Errorf(spec.ErrInvalid, "%s belongs to uid %d, not the job's uid %d; a checkpoint holds only the job's own files (copy it instead of linking it)",
					p, fi.Sys().(*syscall.Stat_t).Uid, owner)
			}
			mf, err := sealFile(f, p, buf)
			f.Close()
			if err != nil {
				return err
			}
			m.Files = append(m.Files, mf)
			m.Bytes += mf.Size
		case st.Type() == "symlink":
			target, err := d.Readlink(n)
			if err != nil {
				return err
			}
			if err := checkLink(p, target); err != nil {
				return spec.Errorf(spec.ErrInvalid, "%s -> %s: %v", p, target, err)
			}
			m.Links = append(m.Links, manifestLink{Path: p, Target: target})
		default:
			return spec.Errorf(spec.ErrInvalid, "%s is a %s; a checkpoint holds only regular files, directories and symlinks inside it", p, st.Type())
		}
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", rel, err)
	}
	return nil
}

// notRegular words a refused open of what was listed as a regular file.
func notRegular(p string, err error) error {
	if safefs.IsNotRegular(err) {
		return spec.Errorf(spec.ErrInvalid, "%s was replaced while sealing (%v); the job must not change its checkpoint after touching %s", p, err, doneName)
	}
	return err
}

// sealFile hashes and fsyncs one open regular file.
func sealFile(f *os.File, p string, buf []byte) (manifestFile, error) {
	sum, n, err := hashOpen(f, p, buf)
	if err != nil {
		return manifestFile{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		return manifestFile{}, err
	}
	if n != fi.Size() {
		return manifestFile{}, spec.Errorf(spec.ErrInvalid, "%s changed while sealing (read %d bytes, now %d); the job must not write after touching %s",
			p, n, fi.Size(), doneName)
	}
	if err := f.Sync(); err != nil {
		return manifestFile{}, fmt.Errorf("fsync %s: %w", p, err)
	}
	return manifestFile{Path: p, Size: n, Mode: fmt.Sprintf("%04o", fi.Mode().Perm()), SHA256: sum}, nil
}

// hashFile opens a regular file inside r and returns it (for the caller to
// close) with its sha256 and length.
func hashFile(r *os.Root, p string, buf []byte) (*os.File, string, int64, error) {
	f, err := openRegular(r, p)
	if err != nil {
		return nil, "", 0, err
	}
	sum, n, err := hashOpen(f, p, buf)
	if err != nil {
		f.Close()
		return nil, "", 0, err
	}
	return f, sum, n, nil
}

// openRegular opens p inside r for reading, refusing anything but a
// regular file. O_NONBLOCK: if the job swapped the file for a FIFO, the
// open must fail the type check rather than hang the agent.
func openRegular(r *os.Root, p string) (*os.File, error) {
	f, err := r.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, spec.Errorf(spec.ErrInvalid, "%s is a %s, not a regular file", p, describeType(fi.Mode().Type()))
	}
	return f, nil
}

// hashOpen returns the sha256 and length of what f holds from its offset.
func hashOpen(f *os.File, p string, buf []byte) (string, int64, error) {
	h := sha256.New()
	// Wrap f so io.CopyBuffer uses buf rather than File.WriteTo's own path.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// checkLink accepts a symlink target only if it is relative and, resolved
// lexically from the link's directory, stays inside the checkpoint. Lexical
// is enough: gpud itself resolves paths in a checkpoint only through an
// os.Root, and the job resolves them inside its container. The rule is for
// the job's sake, so that a checkpoint restores anywhere it is mounted.
func checkLink(p, target string) error {
	if target == "" || path.IsAbs(target) {
		return errors.New("a symlink in a checkpoint must be relative and point inside it")
	}
	if !filepath.IsLocal(path.Join(path.Dir(p), target)) {
		return errors.New("the symlink points outside the checkpoint; a checkpoint must be self-contained")
	}
	return nil
}

func describeType(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "block device"
	case t&fs.ModeSymlink != 0:
		return "symlink"
	case t.IsDir():
		return "directory"
	}
	return "special file"
}

// writeManifest writes MANIFEST.json into dir and fsyncs it and dir. The
// job owns dir: the file is created with O_EXCL|O_NOFOLLOW (safefs), so
// nothing the job put there is written through.
func writeManifest(dir string, m *manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	d, err := safefs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("write manifest in %s: %w", dir, err)
	}
	defer d.Close()
	f, err := d.Create(manifestName, 0o444)
	if err != nil {
		return fmt.Errorf("write manifest in %s: %w", dir, err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write manifest in %s: %w", dir, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync manifest in %s: %w", dir, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write manifest in %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write manifest in %s: %w", dir, err)
	}
	return nil
}

// Verify checks the checkpoint in dir against its MANIFEST.json: every file
// present, a regular file, with the recorded size, and every symlink with
// its recorded target. With full it also re-hashes every file, which reads
// the whole checkpoint. Every mismatch wraps ErrCorrupt.
func Verify(dir string, full bool) (Checkpoint, error) {
	m, err := verify(dir, full)
	if err != nil {
		return Checkpoint{}, err
	}
	return m.checkpoint(dir), nil
}

func verify(dir string, full bool) (*manifest, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %w: %w", dir, ErrCorrupt, err)
	}
	defer r.Close()
	m, err := readManifest(r)
	if err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %w", dir, err)
	}
	if err := checkManifest(r, m, filepath.Base(dir), full); err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %w", dir, err)
	}
	return m, nil
}

func readManifest(r *os.Root) (*manifest, error) {
	// The job owns the checkpoint: a FIFO or device there must not hang
	// or be opened for real.
	f, err := openRegular(r, manifestName)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", manifestName, ErrCorrupt, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", manifestName, ErrCorrupt, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("read %s: larger than %d bytes: %w", manifestName, maxManifestBytes, ErrCorrupt)
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode %s: %w: %w", manifestName, ErrCorrupt, err)
	}
	if m.Version != manifestVersion {
		return nil, fmt.Errorf("%s has version %d, this gpud reads version %d: %w", manifestName, m.Version, manifestVersion, ErrCorrupt)
	}
	return &m, nil
}

func checkManifest(r *os.Root, m *manifest, base string, full bool) error {
	if m.Seq < 1 {
		return fmt.Errorf("%s has seq %d: %w", manifestName, m.Seq, ErrCorrupt)
	}
	// A manifest moved or copied into another ckpt-* directory would
	// otherwise make that directory look like a different checkpoint.
	if seq, ok := parseCkptName(base); ok && seq != m.Seq {
		return fmt.Errorf("%s has seq %d, directory says %d: %w", manifestName, m.Seq, seq, ErrCorrupt)
	}
	var total int64
	var buf []byte
	if full {
		buf = make([]byte, copyBufBytes)
	}
	for _, mf := range m.Files {
		if !filepath.IsLocal(mf.Path) || mf.Path == manifestName {
			return fmt.Errorf("%s lists bad path %q: %w", manifestName, mf.Path, ErrCorrupt)
		}
		fi, err := r.Lstat(mf.Path)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", mf.Path, ErrCorrupt, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is a %s, manifest says regular file: %w", mf.Path, describeType(fi.Mode().Type()), ErrCorrupt)
		}
		if fi.Size() != mf.Size {
			return fmt.Errorf("%s has %d bytes, manifest says %d: %w", mf.Path, fi.Size(), mf.Size, ErrCorrupt)
		}
		total += mf.Size
		if !full {
			continue
		}
		f, sum, n, err := hashFile(r, mf.Path, buf)
		if err != nil {
			return fmt.Errorf("hash %s: %w: %w", mf.Path, ErrCorrupt, err)
		}
		f.Close()
		if n != mf.Size || sum != mf.SHA256 {
			return fmt.Errorf("%s has sha256 %s, manifest says %s: %w", mf.Path, sum, mf.SHA256, ErrCorrupt)
		}
	}
	if total != m.Bytes {
		return fmt.Errorf("%s files add up to %d bytes, it says %d: %w", manifestName, total, m.Bytes, ErrCorrupt)
	}
	for _, ml := range m.Links {
		if !filepath.IsLocal(ml.Path) {
			return fmt.Errorf("%s lists bad path %q: %w", manifestName, ml.Path, ErrCorrupt)
		}
		target, err := r.Readlink(ml.Path)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", ml.Path, ErrCorrupt, err)
		}
		if target != ml.Target {
			return fmt.Errorf("%s points to %s, manifest says %s: %w", ml.Path, target, ml.Target, ErrCorrupt)
		}
	}
	return nil
}
