package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
)

// A job directory holding a sealed checkpoint outlives the job's part on
// the node (RemoveUnsealed keeps it): the node cannot tell a job that
// ended for good from one that may be requeued and restart from it. So
// do two kinds without one: the directory of a part stopped while its
// job may run again (the node agent keeps it for the next attempt,
// which may run on another node), and the empty one a rank other than 0
// leaves on a node-local root. The node agent lists every job directory
// with no runner of its job on the node (Sealed) for the controller,
// which names those whose job ended for good, and removes them once old
// enough (RemoveSealed).

// SealedDir is a job directory in the root, with or without a sealed
// checkpoint.
type SealedDir struct {
	ID spec.JobID
	// Tag is the directory's tag ("" untagged).
	Tag string
	// Changed is the directory's last change (its mtime: a seal, a
	// claim, a new staging directory). The directory is root's, 0711:
	// only the agent changes its entries, so the job's user cannot make
	// it look older or younger.
	Changed time.Time
}

// Sealed lists the job directories in the root (with a sealed
// checkpoint or not: named for what they mostly hold), oldest change
// first, at most limit (<= 0: all), skipping the jobs skip
// reports (the node agent's: a runner of the job on the node). Slots,
// trash and anything not a directory are left out.
func (s *Store) Sealed(limit int, skip func(spec.JobID) bool) ([]SealedDir, error) {
	root, names, err := safefs.OpenDirNamesPath(s.root)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint dirs in %s: %w", s.root, err)
	}
	defer root.Close()
	var out []SealedDir
	for _, n := range names {
		v, err := strconv.ParseUint(n, 10, 64)
		if err != nil || strconv.FormatUint(v, 10) != n || v == 0 {
			continue // a slot, trash, or not a job's
		}
		id := spec.JobID(v)
		if skip != nil && skip(id) {
			continue
		}
		d, ok, err := s.sealedDir(root, n, id)
		if err != nil {
			s.log.Warn("look at checkpoint dir for retention; skipped", "dir", filepath.Join(s.root, n), "err", err)
			continue
		}
		if ok {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b SealedDir) int {
		if c := a.Changed.Compare(b.Changed); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// sealedDir describes root's entry name, job id's directory. A vanished
// entry is not an error.
func (s *Store) sealedDir(root *safefs.Dir, name string, id spec.JobID) (SealedDir, bool, error) {
	jd, err := root.OpenDir(name)
	if errors.Is(err, fs.ErrNotExist) {
		return SealedDir{}, false, nil
	}
	if err != nil {
		return SealedDir{}, false, err
	}
	defer jd.Close()
	tag, err := readTag(jd)
	if err != nil {
		return SealedDir{}, false, err
	}
	changed, err := mtime(jd)
	if err != nil {
		return SealedDir{}, false, err
	}
	return SealedDir{ID: id, Tag: tag, Changed: changed}, true, nil
}

func mtime(d *safefs.Dir) (time.Time, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.Fd(), &st); err != nil {
		return time.Time{}, &fs.PathError{Op: "stat", Path: d.Path(), Err: err}
	}
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec), nil
}

// RemoveSealed removes job id's directory if it is tagged tag ("":
// untagged) and has not changed since before (its mtime, see
// SealedDir), and reports whether it did. The caller holds what keeps
// its own node's attempts of the job from preparing the directory
// meanwhile (the node agent's ckptLock, and no runner of the job); the
// directory is moved aside before it is looked at a last time, so an
// attempt on another node sharing the root that prepares it meanwhile
// makes its own, and one it has prepared or tagged since (a new claim,
// a new staging directory, another tag) is put back. A missing
// directory is not an error.
func (s *Store) RemoveSealed(id spec.JobID, tag string, before time.Time) (bool, error) {
	if err := validTag(tag); err != nil {
		return false, err
	}
	name := strconv.FormatUint(uint64(id), 10)
	path := filepath.Join(s.root, name)
	ok := func(jd *safefs.Dir) (bool, error) {
		have, err := readTag(jd)
		if err != nil || have != tag {
			return false, err
		}
		changed, err := mtime(jd)
		if err != nil {
			return false, err
		}
		return changed.Before(before), nil
	}
	jd, err := safefs.OpenDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove checkpoint dir of ended job %d: %w", id, err)
	}
	yes, err := ok(jd)
	jd.Close()
	if err != nil || !yes {
		return false, err
	}
	trash := filepath.Join(s.root, trashPrefix+name+"-"+randHex())
	if err := renameNoReplace(path, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove checkpoint dir of ended job %d: %w", id, err)
	}
	moved, err := safefs.OpenDir(trash)
	if err == nil {
		yes, err = ok(moved)
		moved.Close()
	}
	if err != nil || !yes {
		if rerr := renameNoReplace(trash, path); rerr != nil {
			return false, fmt.Errorf("put back checkpoint dir of job %d (at %s): %w", id, trash, rerr)
		}
		return false, err
	}
	root, err := safefs.OpenDir(s.root)
	if err == nil {
		err = root.RemoveAll(filepath.Base(trash))
		if err == nil {
			err = root.Sync()
		}
		root.Close()
	}
	if err != nil {
		return false, fmt.Errorf("remove checkpoint dir of ended job %d (moved to %s): %w", id, trash, err)
	}
	return true, nil
}

// Touch sets job id's directory's last change (SealedDir.Changed) to
// now: the node agent's rank 0 does when its part of the job ends and
// the directory stays, so the retention of an ended job's checkpoints
// counts from the job's end, not from its last seal. A missing directory
// is not an error.
func (s *Store) Touch(id spec.JobID) error {
	// By path, not following its last component: the root is the
	// admin's and only root adds entries to it.
	now := unix.NsecToTimespec(s.now().UnixNano())
	err := unix.UtimesNanoAt(unix.AT_FDCWD, s.jobDir(id), []unix.Timespec{now, now}, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "touch", Path: s.jobDir(id), Err: err}
	}
	return nil
}
