package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

const (
	stagingName  = "staging"
	doneName     = ".done"
	manifestName = "MANIFEST.json"
	ckptPrefix   = "ckpt-"
	trashPrefix  = "trash-"
	// seqWidth zero-pads sequence numbers so that ls and sort list
	// checkpoints in order; the code itself sorts by the parsed number.
	seqWidth = 8
)

// ErrNotReady is returned by Seal when the job has not marked its staging
// directory complete (no .done file).
var ErrNotReady = errors.New("checkpoint not ready")

// Checkpoint describes one sealed checkpoint.
type Checkpoint struct {
	// Seq numbers a job's checkpoints from 1; higher is newer.
	Seq int
	// Dir is the absolute path to give the job as GPUD_RESTART_DIR.
	Dir     string
	Created time.Time
	// Bytes and Files count the job's regular files (not the manifest).
	Bytes int64
	Files int
}

// Store keeps the checkpoints of the jobs on one node under one root
// directory.
//
// Calls for different jobs may run concurrently. Calls that change one job's
// directory (Staging, Chown, MarkReady, Seal, Remove) must come from that
// job's owner, the node agent's runner for it; Latest and List may run
// beside them and see either the old or the new set of checkpoints.
type Store struct {
	root string
	keep int
	now  func() time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that stamps each manifest's creation time; tests
// pass a fixed one so manifests are reproducible. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New opens (creating if needed) a store rooted at root that keeps the newest
// keep checkpoints of each job.
func New(root string, keep int, opts ...Option) (*Store, error) {
	if root == "" {
		return nil, spec.Errorf(spec.ErrInvalid, "open checkpoint store: root directory is empty; set the node's checkpoint root")
	}
	if keep < 1 {
		return nil, spec.Errorf(spec.ErrInvalid, "open checkpoint store %s: keep is %d; keep at least 1 checkpoint per job", root, keep)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store %s: %w", root, err)
	}
	// 0711: jobs (other uids) must traverse to their own directories, but
	// need not list which jobs have checkpoints on this node.
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return nil, fmt.Errorf("open checkpoint store %s: %w", abs, err)
	}
	s := &Store{root: abs, keep: keep, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Root returns the store's absolute root directory.
func (s *Store) Root() string { return s.root }

// JobDir returns job id's directory, holding its staging directory and
// sealed checkpoints: what the agent mounts into the job's container.
func (s *Store) JobDir(id spec.JobID) string { return s.jobDir(id) }

func (s *Store) jobDir(id spec.JobID) string {
	return filepath.Join(s.root, strconv.FormatUint(uint64(id), 10))
}

func (s *Store) stagingDir(id spec.JobID) string {
	return filepath.Join(s.jobDir(id), stagingName)
}

func ckptName(seq int) string {
	return fmt.Sprintf("%s%0*d", ckptPrefix, seqWidth, seq)
}

// parseCkptName returns the sequence number of a directory named ckpt-<seq>.
func parseCkptName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, ckptPrefix)
	if !ok || digits == "" {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// Staging creates an empty staging directory for job id and returns its
// path, to be given to the job as GPUD_CHECKPOINT_DIR. Whatever an earlier,
// unsealed attempt left there is removed: without a seal it was never a
// checkpoint. Call Chown next so the job's user can write into it.
func (s *Store) Staging(id spec.JobID) (string, error) {
	jd := s.jobDir(id)
	switch err := os.Mkdir(jd, 0o711); {
	case err == nil:
		// Mkdir applies the umask; the job must still be able to traverse.
		if err := os.Chmod(jd, 0o711); err != nil {
			return "", fmt.Errorf("create checkpoint dir of job %d: %w", id, err)
		}
		// The job directory must survive a crash, or so would nothing in it.
		if err := syncDir(s.root); err != nil {
			return "", fmt.Errorf("create checkpoint dir of job %d: %w", id, err)
		}
	case errors.Is(err, fs.ErrExist):
	default:
		return "", fmt.Errorf("create checkpoint dir of job %d: %w", id, err)
	}
	st := s.stagingDir(id)
	// RemoveAll does not follow symlinks, so a job cannot aim it elsewhere.
	if err := os.RemoveAll(st); err != nil {
		return "", fmt.Errorf("clear staging dir of job %d: %w", id, err)
	}
	// 0700: only the job's uid (after Chown) writes here, not its group,
	// which is often shared by every user.
	if err := os.Mkdir(st, 0o700); err != nil {
		return "", fmt.Errorf("create staging dir of job %d: %w", id, err)
	}
	if err := syncDir(jd); err != nil {
		return "", fmt.Errorf("create staging dir of job %d: %w", id, err)
	}
	return st, nil
}

// Chown gives job id's staging directory to the job's uid and gid so the job
// can write into it. The job directory above it stays the agent's, so the job
// cannot rename or delete sealed checkpoints.
func (s *Store) Chown(id spec.JobID, uid, gid uint32) error {
	if err := os.Lchown(s.stagingDir(id), int(uid), int(gid)); err != nil {
		return fmt.Errorf("chown staging dir of job %d to %d:%d: %w", id, uid, gid, err)
	}
	return nil
}

// Ready reports whether job id has marked its staging directory complete by
// creating a regular file named .done in it.
func (s *Store) Ready(id spec.JobID) bool {
	fi, err := os.Lstat(filepath.Join(s.stagingDir(id), doneName))
	return err == nil && fi.Mode().IsRegular()
}

// MarkReady creates .done in job id's staging directory on the job's behalf.
// The agent calls it when the job exited with ExitCodeCheckpointed: the job
// can no longer write, so what is in staging is final.
func (s *Store) MarkReady(id spec.JobID) error {
	f, err := os.OpenFile(filepath.Join(s.stagingDir(id), doneName), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("mark staging dir of job %d ready: %w", id, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("mark staging dir of job %d ready: %w", id, err)
	}
	return nil
}

// Seal turns job id's staging directory into the next numbered checkpoint:
// it checks that the job marked it ready, hashes and fsyncs every file and
// directory, writes and fsyncs MANIFEST.json, renames the directory to
// ckpt-<seq> and fsyncs the job directory. It then removes checkpoints that
// do not verify and all but the newest keep that do.
//
// Seal refuses staging directories holding anything but regular files,
// directories and symlinks that stay inside the checkpoint; the error names
// the path; the refused staging directory stays, without .done, for the
// next Staging to clear. After Seal the job has no staging directory until
// Staging is called again.
func (s *Store) Seal(id spec.JobID) (Checkpoint, error) {
	jd := s.jobDir(id)
	st := s.stagingDir(id)
	if !s.Ready(id) {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w: %s has no %s; the job must touch it after writing its files (or exit %d)",
			id, ErrNotReady, st, doneName, ExitCodeCheckpointed)
	}
	// .done is protocol, not data: it must not be in the manifest or the
	// restart directory, where a restarted job would take it for its own.
	if err := os.Remove(filepath.Join(st, doneName)); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	existing, err := listSeqs(jd)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	// One past every ckpt-* present, valid or not, so that numbers only grow
	// while the job has a directory; invalid ones are removed only below.
	seq := 1
	if len(existing) > 0 {
		seq = slices.Max(existing) + 1
	}
	m, err := scan(st)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	m.Version = manifestVersion
	m.JobID = id
	m.Seq = seq
	m.Created = s.now().UTC()
	if err := writeManifest(st, m); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	dst := filepath.Join(jd, ckptName(seq))
	if err := os.Rename(st, dst); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	if err := syncDir(jd); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	kept, err := s.prune(id)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	// The job still holds the directory open and may have written to it
	// after hashing; prune verified it again and dropped it if so.
	if len(kept) == 0 || kept[len(kept)-1].Seq != seq {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %s changed while sealing and was removed; the job must not write after touching %s: %w",
			id, dst, doneName, ErrCorrupt)
	}
	return kept[len(kept)-1], nil
}

// Latest returns job id's newest checkpoint whose manifest verifies (every
// file present with its recorded size), or false if there is none. A
// half-written or tampered checkpoint is skipped, never offered for restart.
func (s *Store) Latest(id spec.JobID) (Checkpoint, bool, error) {
	valid, _, err := s.scanJob(id)
	if err != nil {
		return Checkpoint{}, false, err
	}
	if len(valid) == 0 {
		return Checkpoint{}, false, nil
	}
	return valid[len(valid)-1], true, nil
}

// List returns job id's checkpoints that verify, oldest first.
func (s *Store) List(id spec.JobID) ([]Checkpoint, error) {
	valid, _, err := s.scanJob(id)
	return valid, err
}

// Remove deletes everything the store holds for job id. Removing a job that
// has nothing stored is not an error.
func (s *Store) Remove(id spec.JobID) error {
	if err := os.RemoveAll(s.jobDir(id)); err != nil {
		return fmt.Errorf("remove checkpoints of job %d: %w", id, err)
	}
	return nil
}

// scanJob quick-verifies every ckpt-* directory of job id and returns the
// valid ones oldest first, and the names of the rest.
func (s *Store) scanJob(id spec.JobID) (valid []Checkpoint, invalid []string, err error) {
	jd := s.jobDir(id)
	seqs, err := listSeqs(jd)
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints of job %d: %w", id, err)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		dir := filepath.Join(jd, ckptName(seq))
		m, err := verify(dir, false)
		if err == nil && m.JobID != id {
			err = fmt.Errorf("manifest is for job %d: %w", m.JobID, ErrCorrupt)
		}
		if err != nil {
			invalid = append(invalid, ckptName(seq))
			continue
		}
		valid = append(valid, m.checkpoint(dir))
	}
	return valid, invalid, nil
}

// prune removes leftovers of interrupted deletions, every checkpoint that
// does not verify, and all but the newest keep that do. It returns the kept
// ones, oldest first.
func (s *Store) prune(id spec.JobID) ([]Checkpoint, error) {
	jd := s.jobDir(id)
	entries, err := os.ReadDir(jd)
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			if err := os.RemoveAll(filepath.Join(jd, e.Name())); err != nil {
				return nil, fmt.Errorf("prune checkpoints: %w", err)
			}
		}
	}
	valid, invalid, err := s.scanJob(id)
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	drop := invalid
	if n := len(valid) - s.keep; n > 0 {
		for _, c := range valid[:n] {
			drop = append(drop, filepath.Base(c.Dir))
		}
		valid = valid[n:]
	}
	for _, name := range drop {
		// Rename first so that a crash halfway through RemoveAll leaves a
		// trash-* directory, not a ckpt-* with some files missing.
		trash := filepath.Join(jd, trashPrefix+name)
		if err := os.Rename(filepath.Join(jd, name), trash); err != nil {
			return nil, fmt.Errorf("prune checkpoint %s: %w", name, err)
		}
		if err := os.RemoveAll(trash); err != nil {
			return nil, fmt.Errorf("prune checkpoint %s: %w", name, err)
		}
	}
	if len(drop) > 0 {
		if err := syncDir(jd); err != nil {
			return nil, fmt.Errorf("prune checkpoints: %w", err)
		}
	}
	return valid, nil
}

// listSeqs returns the sequence numbers of the ckpt-* directories in jobDir,
// in directory order; a missing jobDir has none.
func listSeqs(jobDir string) ([]int, error) {
	entries, err := os.ReadDir(jobDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var seqs []int
	for _, e := range entries {
		if seq, ok := parseCkptName(e.Name()); ok && e.IsDir() {
			seqs = append(seqs, seq)
		}
	}
	return seqs, nil
}

// syncDir fsyncs a directory so that entries created, renamed or removed in
// it survive a crash.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return f.Close()
}
