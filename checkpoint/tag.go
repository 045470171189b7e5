package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

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
func JobTag(submitNS int64) string {
	if submitNS == 0 {
		return ""
	}
	return "submit_ns=" + strconv.FormatInt(submitNS, 10)
}

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
	if err := validTag(tag); err != nil {
		return nil, false, err
	}
	for try := 0; ; try++ {
		jd, made, err = s.openJobMade(id, create)
		if err != nil || tag == "" {
			return jd, made, err
		}
		have, err := readTag(jd)
		if err == nil && have == "" {
			have, err = writeTag(jd, tag)
		}
		if err != nil {
			jd.Close()
			return nil, false, fmt.Errorf("tag of checkpoint dir of job %d: %w", id, err)
		}
		if have == tag {
			return jd, made, nil
		}
		jd.Close()
		if !create {
			return nil, false, fmt.Errorf("checkpoint dir %s is tagged %q, the job %q: %w", s.jobDir(id), have, tag, ErrOtherJob)
		}
		if try >= raceRetries {
			return nil, false, fmt.Errorf("checkpoint dir %s of job %d keeps being replaced by another job's (tagged %q, the job %q)", s.jobDir(id), id, have, tag)
		}
		if err := s.replaceOther(id, tag, have); err != nil {
			return nil, false, err
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

// Mark names the attempt that last readied a job's directory (Claim): a
// random value kept in the directory (claimName, root's), so another
// attempt's Claim of the same job (a requeue started on a node sharing
// the root) is told apart from the runner's own. The zero Mark is none.
type Mark struct{ nonce string }

const claimName = ".claim"

// Claim marks job id's directory, which exists, as readied by the caller
// (after Prepare or AdoptSlot), replacing an earlier attempt's mark, and
// returns the mark for RemoveUnsealed. Not fsynced: a mark lost in a
// crash only leaves the directory to stay.
func (s *Store) Claim(id spec.JobID) (Mark, error) {
	jd, err := s.openJob(id, false)
	if err != nil {
		return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
	}
	defer jd.Close()
	m := Mark{nonce: randHex()}
	tmp := claimName + "-" + m.nonce
	if err := jd.WriteNew(tmp, []byte(m.nonce), 0o600, -1, -1); err != nil {
		return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
	}
	if err := jd.Rename(tmp, jd, claimName); err != nil {
		_ = jd.Remove(tmp)
		return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
	}
	return m, nil
}

// markOf reads the mark of open job directory jd (zero: none).
func markOf(jd *safefs.Dir) Mark {
	f, err := jd.OpenRegular(claimName)
	if err != nil {
		return Mark{}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, tagMax))
	if err != nil {
		return Mark{}
	}
	return Mark{nonce: string(b)}
}

// RemoveUnsealed removes job id's directory when the job's part that
// claimed it (mark) ends and nothing was sealed in it: no ckpt-* (valid
// or not), the directory tagged tag ("": no check) and still marked mark
// (not claimed by another attempt since). It reports
// whether it removed it; a directory that does not qualify is left as it
// is, and a missing one is not an error. The directory is moved aside
// before it is looked at a last time, so a Prepare of another attempt
// meanwhile makes its own (the move is undone when it no longer
// qualifies).
func (s *Store) RemoveUnsealed(id spec.JobID, tag string, mark Mark) (bool, error) {
	if mark == (Mark{}) {
		return false, nil
	}
	qualifies := func(jd *safefs.Dir) (bool, error) {
		if have, err := readTag(jd); err != nil || (tag != "" && have != tag) {
			return false, err
		}
		if seqs, err := listSeqs(jd); err != nil || len(seqs) > 0 {
			return false, err
		}
		return markOf(jd) == mark, nil
	}
	jd, err := s.openJob(id, false)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove checkpoint dir of job %d: %w", id, err)
	}
	ok, err := qualifies(jd)
	jd.Close()
	if !ok || err != nil {
		return false, err
	}
	root, err := safefs.OpenDir(s.root)
	if err != nil {
		return false, fmt.Errorf("remove checkpoint dir of job %d: %w", id, err)
	}
	defer root.Close()
	name := strconv.FormatUint(uint64(id), 10)
	trash := trashPrefix + name + "-" + randHex()
	if err := root.RenameNoReplace(name, root, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove checkpoint dir of job %d: %w", id, err)
	}
	moved, err := root.OpenDir(trash)
	if err == nil {
		ok, err = qualifies(moved)
		moved.Close()
	}
	if !ok || err != nil {
		if rerr := root.RenameNoReplace(trash, root, name); rerr != nil {
			return false, fmt.Errorf("put back checkpoint dir of job %d (at %s): %w", id, trash, rerr)
		}
		return false, err
	}
	if err := root.RemoveAll(trash); err != nil {
		return false, fmt.Errorf("remove checkpoint dir of job %d (moved to %s): %w", id, trash, err)
	}
	return true, nil
}
