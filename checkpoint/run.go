package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
)

// A run directory is the staging directory of one run of a job that can
// checkpoint only as it exits (no --checkpoint, no --signal: it touches
// .done or exits ExitCodeCheckpointed; nothing signals it to checkpoint
// while it runs) and has no job directory in the root when it starts:
// the usual job, which never checkpoints. It is an entry of the root of
// its own, run-<name> (the user's, 0700: the staging directory itself),
// so such a job's start makes one directory instead of the job's
// directory with its tag, its claim and its staging directory, and its
// end removes one (2 system calls and no file written, against ~22 and
// the tag's page: docs/fleet.md, session 20 — agentcost).
//
// What the job sees is what a job sees in its job directory's staging
// directory: an empty directory of its own for GPUD_CHECKPOINT_DIR, no
// GPUD_RESTART_DIR (it has no checkpoint: its job directory does not
// exist). Only when it exits with a checkpoint is the job directory made
// (tagged and claimed, as Prepare makes it) and the run directory moved
// into it as its staging directory (AdoptRun), where SealUnless seals it
// as any other. The root is root's (0711) and only root adds, renames or
// removes its entries, so the job's user can neither move the run
// directory nor put anything in its place; what the user leaves in it is
// never followed (RemoveRun walks it through descriptors). Run
// directories, like slots and trash, are not job directories: Sealed,
// retention and older agents' listings skip them (not digits only).
const runPrefix = "run-"

// RunName is the name of the run directory of container id (a node
// agent's container ID: unique to the node and the run).
func RunName(container string) string { return runPrefix + container }

// RunContainer returns the container ID of run directory name, and false
// when name is not one.
func RunContainer(name string) (string, bool) {
	c, ok := strings.CutPrefix(name, runPrefix)
	return c, ok && c != "" && !strings.ContainsAny(c, "/\x00") && c != "." && c != ".."
}

func (s *Store) runPath(name string) (string, error) {
	if _, ok := RunContainer(name); !ok {
		return "", fmt.Errorf("checkpoint run directory name %q: must be %s<container>", name, runPrefix)
	}
	return filepath.Join(s.root, name), nil
}

// PrepareRun makes run directory name for job id, given to uid:gid
// (none when uid is negative), and returns its path, when the job has no
// directory in the root; when it has one (ok false), nothing is made: the
// caller prepares that one (Prepare, PrepareClaim), which may hold the
// checkpoint to restart from. A run directory left by a start cut short
// under the same name is removed first.
func (s *Store) PrepareRun(name string, id spec.JobID, uid, gid int) (dir string, ok bool, err error) {
	path, err := s.runPath(name)
	if err != nil {
		return "", false, err
	}
	var st unix.Stat_t
	switch err := unix.Fstatat(unix.AT_FDCWD, s.jobDir(id), &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return "", false, nil
	case err != unix.ENOENT:
		return "", false, fmt.Errorf("look for the checkpoint dir of job %d: %w", id, &fs.PathError{Op: "lstat", Path: s.jobDir(id), Err: err})
	}
	for try := 0; ; try++ {
		// 0700: only the job's uid writes here (as a staging
		// directory). Given away by name: the root is root's and only
		// root adds entries to it (safefs.MkdirPathFor).
		err = safefs.MkdirPathFor(path, 0o700, uid, gid)
		if errors.Is(err, fs.ErrExist) && try == 0 {
			if err = s.RemoveRun(name); err == nil {
				continue
			}
		}
		if err != nil {
			return "", false, fmt.Errorf("create checkpoint run dir of job %d: %w", id, err)
		}
		// Not fsynced: lost in a crash, it held no checkpoint.
		return path, true, nil
	}
}

// RunExists reports whether run directory name is there (an adopted
// run's: the agent that started it made it).
func (s *Store) RunExists(name string) bool {
	path, err := s.runPath(name)
	if err != nil {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(unix.AT_FDCWD, path, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// RunReady is Ready for run directory name: whether the job made .done,
// a regular file, in it.
func (s *Store) RunReady(name string) bool {
	path, err := s.runPath(name)
	if err != nil {
		return false
	}
	// One lstat of <root>/<name>/.done: only its last component is the
	// job's to make (the root is root's), and lstat does not follow it.
	var st unix.Stat_t
	err = unix.Fstatat(unix.AT_FDCWD, filepath.Join(path, doneName), &st, unix.AT_SYMLINK_NOFOLLOW)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// EndRun is RunReady for run directory name once its job has exited
// (nothing of the job writes there any more): an empty run directory
// (the usual job's) holds no .done, so it is removed at once, one rmdir
// where RunReady's lstat and RemoveRun's rmdir were two; gone reports
// that it is not there any more. Otherwise ready is RunReady's answer
// and the directory stays (to be adopted, or removed by RemoveRun).
func (s *Store) EndRun(name string) (ready, gone bool) {
	path, err := s.runPath(name)
	if err != nil {
		return false, false
	}
	// rmdir never follows its last component, and removes only an
	// empty directory: nothing the job left is touched.
	switch err := unix.Rmdir(path); err {
	case nil, unix.ENOENT:
		return false, true
	}
	return s.RunReady(name), false
}

// MarkRunReady is MarkReady for run directory name (the job exited
// ExitCodeCheckpointed): .done made on the job's behalf, anything else
// than a regular file there refused (an error wrapping ErrRefused).
func (s *Store) MarkRunReady(name string) error {
	path, err := s.runPath(name)
	if err != nil {
		return err
	}
	st, err := safefs.OpenDir(path)
	if err == nil {
		err = markReady(st)
		st.Close()
	}
	if err != nil {
		return fmt.Errorf("mark checkpoint run dir %s ready: %w", name, err)
	}
	return nil
}

// ErrJobDirMade is wrapped by AdoptRun's error when the job's directory
// appeared after its run directory was made: another attempt of the job
// (a requeue on a node sharing the root) prepared it and owns its
// staging directory, so this run's checkpoint is not sealed there.
var ErrJobDirMade = errors.New("the job's checkpoint directory was made by another attempt meanwhile")

// AdoptRun makes run directory name job id's staging directory, to be
// sealed: the job's directory is made, tagged tag and claimed (the mark
// returned, for RemoveUnsealed), as PrepareClaim makes it, and the run
// directory is renamed into it as staging/ (without replacing: the
// directory was just made). A job directory that exists already (made
// since the run directory by another attempt; one of another job is
// replaced, as Prepare does) is left alone: an error wrapping
// ErrJobDirMade, and the run directory stays where it is.
func (s *Store) AdoptRun(name string, id spec.JobID, tag string) (Mark, error) {
	path, err := s.runPath(name)
	if err != nil {
		return Mark{}, err
	}
	jd, made, m, err := s.openTaggedClaim(id, tag, true, true)
	if err != nil {
		return Mark{}, fmt.Errorf("create checkpoint dir of job %d for its run's checkpoint: %w", id, err)
	}
	defer jd.Close()
	if !made {
		return Mark{}, fmt.Errorf("move checkpoint run dir %s into %s: %w", name, s.jobDir(id), ErrJobDirMade)
	}
	if m == (Mark{}) { // untagged (no tag given): claimed apart
		if m, err = claim(jd, nil); err != nil {
			return Mark{}, fmt.Errorf("claim checkpoint dir of job %d: %w", id, err)
		}
	}
	// Neither name is followed (renameat2); the job's directory is
	// root's, 0711, and was made empty but for its tag and claim.
	if err := unix.Renameat2(unix.AT_FDCWD, path, jd.Fd(), stagingName, unix.RENAME_NOREPLACE); err != nil {
		return Mark{}, fmt.Errorf("move checkpoint run dir %s into %s: %w", name, s.jobDir(id),
			&fs.PathError{Op: "rename", Path: path, Err: err})
	}
	return m, nil
}

// RemoveRun removes run directory name and what the job left in it,
// following nothing; a missing one is not an error.
func (s *Store) RemoveRun(name string) error {
	path, err := s.runPath(name)
	if err != nil {
		return err
	}
	// Empty (the usual job's): one rmdir, which never follows its last
	// component. Otherwise the walk through descriptors.
	switch err := unix.Rmdir(path); err {
	case nil, unix.ENOENT:
		return nil
	}
	if err := s.removeAll(name); err != nil {
		return fmt.Errorf("remove checkpoint run dir %s: %w", name, err)
	}
	return nil
}

// Runs lists the run directories in the root (their names), for an agent
// to remove those its crashed predecessor left.
func (s *Store) Runs() ([]string, error) {
	root, names, err := safefs.OpenDirNamesPath(s.root)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint run dirs in %s: %w", s.root, err)
	}
	root.Close()
	var out []string
	for _, n := range names {
		if _, ok := RunContainer(n); ok {
			out = append(out, n)
		}
	}
	return out, nil
}
