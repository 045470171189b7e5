package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
)

// A job's directory is named by its job ID only, and job IDs name jobs
// only within one controller state: a reset controller numbers its jobs
// from 1 again. So each job directory carries a tag, a file the agent
// writes (tagName, 0600, root's) before anything in it is offered to a
// job: the job's fingerprint, the same on every node and across the
// job's requeues (the node agent uses the job's submit time, see
// JobTag). A directory tagged for another job is never offered: the
// calls given a tag move it aside and remove it, or refuse it
// (ErrOtherJob). A directory without a tag (made by an agent from
// before tags, or one whose maker crashed before tagging it) cannot be
// told apart from the job's own: it is taken as the job's and tagged.

const (
	tagName = ".job"
	// tagMax bounds how much of a tag file is read.
	tagMax = 256
)

// ErrOtherJob is wrapped by the errors of calls given a tag when job
// id's directory is tagged for another job (one of the same ID under an
// earlier controller state): its checkpoints are not this job's.
var ErrOtherJob = errors.New("checkpoint directory belongs to another job of the same ID")

// JobTag is the tag of the job submitted at submitNS (its submit time in
// Unix nanoseconds), "" (untagged) when that is unknown (0).
func JobTag(submitNS int64) string { return spec.CheckpointTag(submitNS) }

func validTag(tag string) error {
	if len(tag) > tagMax-1 || strings.ContainsAny(tag, "\n\x00") {
		return fmt.Errorf("checkpoint tag %q: at most %d bytes, no newline or NUL", tag, tagMax-1)
	}
	return nil
}

// readTag returns the tag of open job directory jd, "" when it has none.
func readTag(jd *safefs.Dir) (string, error) {
	f, err := jd.OpenRegular(tagName)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, tagMax))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// writeTag tags open job directory jd with tag unless it has a tag
// already, and returns the tag it has then. The tag file is written
// under a temporary name and renamed into place without replacing, so a
// reader never sees half a tag and two ranks of a gang tagging at once
// keep the first. It is not fsynced here (no fsync on a job's start):
// a tag matters once a checkpoint is sealed, and SealUnless makes it
// durable first (syncTag).
func writeTag(jd *safefs.Dir, tag string) (string, error) {
	tmp := tagName + "-" + randHex()
	if err := jd.WriteNew(tmp, []byte(tag+"\n"), 0o600, -1, -1); err != nil {
		return "", err
	}
	err := jd.RenameNoReplace(tmp, jd, tagName)
	if err == nil {
		return tag, nil
	}
	if rerr := jd.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return "", rerr
	}
	if !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return readTag(jd)
}

// claimTag claims and tags open job directory jd, which the caller has
// just made, in one file: the claim (claimPrefix+nonce, root's, 0600)
// holds the tag and is hard-linked as the tag without replacing (linkat:
// the tag is complete when it appears, as writeTag's rename makes it; a
// rank that tagged first keeps its tag, which is returned). Where the
// file system has no hard links the tag is written as writeTag does.
func claimTag(jd *safefs.Dir, tag string) (Mark, string, error) {
	m := Mark{nonce: randHex()}
	if err := jd.WriteNew(m.name(), []byte(tag+"\n"), 0o600, -1, -1); err != nil {
		return Mark{}, "", err
	}
	err := jd.Link(m.name(), jd, tagName)
	switch {
	case err == nil:
		return m, tag, nil
	case errors.Is(err, fs.ErrExist):
		have, err := readTag(jd)
		return m, have, err
	}
	have, err := writeTag(jd, tag)
	return m, have, err
}

// syncTag fsyncs open job directory jd's tag file, if any (its entry
// is made durable with the directory's fsync that follows a seal).
func syncTag(jd *safefs.Dir) error {
	f, err := jd.OpenRegular(tagName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// openTagged opens job id's directory for the job tagged tag ("": no
// check, as openJobMade). An untagged directory is tagged. With create,
// a missing directory is made (and tagged) and one tagged for another
// job is moved aside, removed and replaced by a fresh one (the move and
// removal are logged); without, a missing directory is an error
// wrapping fs.ErrNotExist and another job's one wrapping ErrOtherJob.
// made says the directory is new (empty but for its tag).
func (s *Store) openTagged(id spec.JobID, tag string, create bool) (jd *safefs.Dir, made bool, err error) {
	jd, made, _, err = s.openTaggedClaim(id, tag, create, false)
	return jd, made, err
}

// openTaggedClaim is openTagged that, with claimIt, claims a directory it
// has just made and tags together (claimTag) and returns the mark; the
// mark is zero when it made no claim (the caller claims).
func (s *Store) openTaggedClaim(id spec.JobID, tag string, create, claimIt bool) (jd *safefs.Dir, made bool, m Mark, err error) {
	if err := validTag(tag); err != nil {
		return nil, false, Mark{}, err
	}
	for try := 0; ; try++ {
		m = Mark{}
		jd, made, err = s.openJobMade(id, create)
		if err != nil || tag == "" {
			return jd, made, Mark{}, err
		}
		// A directory just made has no tag unless another rank of the
		// job tagged it meanwhile, which writeTag finds.
		var have string
		if !made {
			have, err = readTag(jd)
		}
		if err == nil && have == "" {
			if made && claimIt {
				m, have, err = claimTag(jd, tag)
			} else {
				have, err = writeTag(jd, tag)
			}
		}
		if err != nil {
			jd.Close()
			return nil, false, Mark{}, fmt.Errorf("tag of checkpoint dir of job %d: %w", id, err)
		}
		if have == tag {
			return jd, made, m, nil
		}
		jd.Close()
		if !create {
			return nil, false, Mark{}, fmt.Errorf("checkpoint dir %s is tagged %q, the job %q: %w", s.jobDir(id), have, tag, ErrOtherJob)
		}
		if try >= raceRetries {
			return nil, false, Mark{}, fmt.Errorf("checkpoint dir %s of job %d keeps being replaced by another job's (tagged %q, the job %q)", s.jobDir(id), id, have, tag)
		}
		if err := s.replaceOther(id, tag, have); err != nil {
			return nil, false, Mark{}, err
		}
	}
}

// replaceOther moves job id's directory, found tagged other (not tag),
// aside and removes it. Another rank of the job may have replaced it
// meanwhile (a shared checkpoint root): what was moved is looked at
// again, and put back unless it is the other job's.
func (s *Store) replaceOther(id spec.JobID, tag, other string) error {
	root, err := safefs.OpenDir(s.root)
	if err != nil {
		return fmt.Errorf("replace checkpoint dir of job %d: %w", id, err)
	}
	defer root.Close()
	name := strconv.FormatUint(uint64(id), 10)
	trash := trashPrefix + name + "-" + randHex()
	if err := root.RenameNoReplace(name, root, trash); errors.Is(err, fs.ErrNotExist) {
		return nil // another rank moved it
	} else if err != nil {
		return fmt.Errorf("move aside checkpoint dir %s of another job: %w", s.jobDir(id), err)
	}
	if moved, err := root.OpenDir(trash); err == nil {
		have, _ := readTag(moved)
		moved.Close()
		if have != other && root.RenameNoReplace(trash, root, name) == nil {
			return nil // another rank's fresh one for the job: put back
		}
	}
	s.log.Warn("checkpoint directory of an earlier job with the same ID (a reset controller state) removed; it is never offered to this job",
		"job_id", id, "dir", s.jobDir(id), "dir_tag", other, "job_tag", tag)
	if err := root.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove checkpoint dir of another job %d (moved to %s): %w", id, trash, err)
	}
	return root.Sync()
}

// Mark names the attempt that last readied a job's directory (Claim,
// PrepareClaim): a random value, kept in the directory as the name of a
// file (claimPrefix+value, root's; empty, or, for the claim that tagged
// the directory, the tag's hard link), so that another attempt's claim
// of the same job (a requeue started on a node sharing the root, or on
// this node) is told apart from the runner's own by listing the
// directory, which RemoveUnsealed does anyway to see that nothing was
// sealed. A claim replaces the claims before it (removes their files);
// a directory holding any other claim, or none, is not the holder's to
// remove. The zero Mark is none.
//
// A claim is only ever made in a directory the claimer has opened and
// found tagged for its job (openTagged), and a tag never changes once
// written (a directory of another job is moved aside whole, never
// retagged): a directory holding the caller's claim is the caller's
// job's, so RemoveUnsealed needs no second look at the tag.
type Mark struct{ nonce string }

const (
	claimPrefix = ".claim-"
	// oldClaimName is where agents before claims by name kept the claim's
	// value; such a file is another attempt's claim.
	oldClaimName = ".claim"
)

func (m Mark) name() string { return claimPrefix + m.nonce }

// isClaim reports whether entry name of a job directory is a claim.
func isClaim(name string) bool {
	return name == oldClaimName || strings.HasPrefix(name, claimPrefix)
}

// Claim marks job id's directory, which exists and is tagged tag (""
// : no check; another job's is refused with an error wrapping
// ErrOtherJob), as readied by the caller (after AdoptSlot), replacing an
// earlier attempt's mark, and returns the mark for RemoveUnsealed. Not
// fsynced: a mark lost in a crash only leaves the directory to stay.
func (s *Store) Claim(id spec.JobID, tag string) (Mark, error) {
	jd, _, err := s.openTagged(id, tag, false)
	if err != nil {
		return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
	}
	defer jd.Close()
	names, err := jd.Names()
	if err != nil {
		return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
	}
	m, err := claim(jd, names)
	if err != nil {
		return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
	}
	return m, nil
}

// claim marks open job directory jd, whose entries were names when it
// was listed last (nil: a directory just made), as the caller's: its
// claim file is made, then the earlier claims among names are removed.
func claim(jd *safefs.Dir, names []string) (Mark, error) {
	m := Mark{nonce: randHex()}
	if err := jd.Touch(m.name()); err != nil {
		return Mark{}, err
	}
	for _, n := range names {
		if isClaim(n) && n != m.name() {
			if err := jd.Unlink(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return Mark{}, err
			}
		}
	}
	return m, nil
}

// removable reports whether a job directory holding names may be
// removed by the holder of mark: no ckpt-* (valid or not, of any type)
// and no claim but mark's.
func removable(names []string, mark Mark) bool {
	mine := false
	for _, n := range names {
		switch {
		case n == mark.name():
			mine = true
		case isClaim(n):
			return false
		default:
			if _, ok := parseCkptName(n); ok {
				return false
			}
		}
	}
	return mine
}

// RemoveUnsealed removes job id's directory when the job's part that
// claimed it (mark) ends and nothing was sealed in it: no ckpt-* (valid
// or not) and no other attempt's claim since. It reports whether it
// removed it; a directory that does not qualify is left as it is, and a
// missing one is not an error. The directory is moved aside before it is
// looked at a last time, so a Prepare of another attempt meanwhile makes
// its own (the move is undone when it no longer qualifies). What is
// removed is what the last look listed, each entry by name (the
// directory is root's, 0711: only root adds entries to it; the staging
// directory, the user's, is walked only when the job left something
// there), so a job that never checkpointed costs no walk.
func (s *Store) RemoveUnsealed(id spec.JobID, mark Mark) (bool, error) {
	if mark == (Mark{}) {
		return false, nil
	}
	// By paths from the root: it is the admin's and only root adds
	// entries to it or to the job's directory (no descriptor of the root
	// needed; renames and rmdirs never follow their last component).
	name := strconv.FormatUint(uint64(id), 10)
	path := filepath.Join(s.root, name)
	jd, names, err := safefs.OpenDirNamesPath(path)
	if err == nil {
		jd.Close()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove checkpoint dir of job %d: %w", id, err)
	}
	if !removable(names, mark) {
		return false, nil
	}
	trash := filepath.Join(s.root, trashPrefix+name+"-"+randHex())
	if err := renameNoReplace(path, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove checkpoint dir of job %d: %w", id, err)
	}
	moved, names, err := safefs.OpenDirNamesPath(trash)
	if err != nil || !removable(names, mark) {
		if moved != nil {
			moved.Close()
		}
		if rerr := renameNoReplace(trash, path); rerr != nil {
			return false, fmt.Errorf("put back checkpoint dir of job %d (at %s): %w", id, trash, rerr)
		}
		return false, err
	}
	for _, n := range names {
		// staging/ is a directory, empty unless the job left files
		// there: one rmdir, the walk only when that fails.
		if n != stagingName || moved.Rmdir(n) != nil {
			err = moved.RemoveAll(n)
		}
		if err != nil {
			break
		}
	}
	moved.Close()
	if err == nil {
		if rerr := unix.Rmdir(trash); rerr != nil {
			err = &fs.PathError{Op: "remove", Path: trash, Err: rerr}
		}
	}
	if err != nil {
		// Something appeared meanwhile (nothing but root adds entries):
		// the full walk.
		root, rerr := safefs.OpenDir(s.root)
		if rerr == nil {
			rerr = root.RemoveAll(filepath.Base(trash))
			root.Close()
		}
		if rerr != nil {
			return false, fmt.Errorf("remove checkpoint dir of job %d (moved to %s): %w", id, trash, rerr)
		}
	}
	return true, nil
}

// renameNoReplace renames old to new, paths in the store's root (whose
// entries only root makes), failing with an error wrapping fs.ErrExist
// when new exists; the last component of neither is followed.
func renameNoReplace(old, new string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: old, New: new, Err: err}
	}
	return nil
}
