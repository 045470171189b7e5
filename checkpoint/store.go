package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
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
	log  *slog.Logger
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that stamps each manifest's creation time; tests
// pass a fixed one so manifests are reproducible. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithLogger sets where the store logs what it removes on its own (a
// directory of another job of the same ID). The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) { s.log = l }
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
	s := &Store{root: abs, keep: keep, now: time.Now, log: slog.New(slog.DiscardHandler)}
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

// The store's root and each job's directory are the agent's (0711: jobs
// traverse them); each staging directory, and so each sealed checkpoint
// made from one, is the job's user's. Everything the store does inside
// those goes through descriptors (safefs), never by following a path the
// user could have changed.

// openJob opens job id's directory, creating it (0711) when create is set.
func (s *Store) openJob(id spec.JobID, create bool) (*safefs.Dir, error) {
	jd, _, err := s.openJobMade(id, create)
	return jd, err
}

// openJobMade is openJob, and says whether it made the directory (then
// empty: nothing was ever staged or sealed in it).
func (s *Store) openJobMade(id spec.JobID, create bool) (jd *safefs.Dir, made bool, err error) {
	// By its path: the root is the admin's and only root adds entries to
	// it, so its own descriptor is not needed (safefs.MkdirPath).
	path := s.jobDir(id)
	if !create {
		jd, err = safefs.OpenDir(path)
		return jd, false, err
	}
	// Made first, opened only when it is there already (a job's first
	// start, the usual one, costs no failed open).
	jd, err = safefs.MkdirPath(path, 0o711)
	if errors.Is(err, fs.ErrExist) {
		jd, err = safefs.OpenDir(path) // an earlier attempt's, or another rank's agent's
		return jd, false, err
	}
	if err != nil {
		return nil, false, err
	}
	// Not fsynced here: until a checkpoint is sealed in it, a job
	// directory lost in a crash holds nothing to lose, and the next start
	// makes it again. SealUnless makes it durable with the first seal.
	return jd, true, nil
}

// Staging creates an empty staging directory for job id and returns its
// path, to be given to the job as GPUD_CHECKPOINT_DIR. Whatever an earlier,
// unsealed attempt left there is removed: without a seal it was never a
// checkpoint. Call Chown next so the job's user can write into it.
func (s *Store) Staging(id spec.JobID) (string, error) {
	jd, err := s.openJob(id, true)
	if err != nil {
		return "", fmt.Errorf("create checkpoint dir of job %d: %w", id, err)
	}
	defer jd.Close()
	if err := s.staging(id, jd, true, -1, -1); err != nil {
		return "", err
	}
	return s.stagingDir(id), nil
}

// Restage is Staging then Chown to uid:gid (none when uid is negative)
// for a job whose directory exists, after a seal: a missing directory is
// not made again (an error wrapping fs.ErrNotExist), and one tagged for
// another job than tag ("": no check) is left alone (ErrOtherJob), so an
// old runner never clears or makes a new job's staging directory.
func (s *Store) Restage(id spec.JobID, tag string, uid, gid int) (string, error) {
	jd, _, err := s.openTagged(id, tag, false)
	if err != nil {
		return "", fmt.Errorf("re-create staging dir of job %d: %w", id, err)
	}
	defer jd.Close()
	if err := s.staging(id, jd, true, uid, gid); err != nil {
		return "", err
	}
	return s.stagingDir(id), nil
}

// staging makes an empty staging directory in job id's open directory
// jd, clearing what an earlier attempt left first if clear is set, and
// gives it to uid:gid unless uid is negative.
func (s *Store) staging(id spec.JobID, jd *safefs.Dir, clear bool, uid, gid int) error {
	// On a shared checkpoint root the other ranks of a gang Join at the
	// same time: one may make the directory between the clear and the
	// make. It is new and empty, so clear it again (bounded: Join makes it
	// at most once per rank).
	for try := 0; ; try++ {
		if clear || try > 0 {
			if err := jd.RemoveAll(stagingName); err != nil {
				return fmt.Errorf("clear staging dir of job %d: %w", id, err)
			}
		}
		// 0700: only the job's uid writes here, not its group, which is
		// often shared by every user. Given away by name: jd is root's,
		// 0711, and only root adds entries to it (safefs.MkdirFor).
		err := jd.MkdirFor(stagingName, 0o700, uid, gid)
		if errors.Is(err, fs.ErrExist) && try < raceRetries {
			continue
		}
		if err != nil {
			return fmt.Errorf("create staging dir of job %d owned by %d:%d: %w", id, uid, gid, err)
		}
		break
	}
	// Not fsynced: a staging directory lost in a crash held no
	// checkpoint (sealing renames it and fsyncs what it made), and the
	// next start makes a fresh one.
	return nil
}

// Prepare readies job id's checkpoint directory for a start on the node
// whose agent seals its checkpoints: Staging, then Chown to uid:gid
// (none when uid is negative), then Latest, in one pass (the root and the
// job's directory opened once; a job directory it has just made holds
// nothing, so there is nothing to clear or list in it). It returns the
// newest checkpoint that verifies, if any. tag is the job's (see
// openTagged; "": none): a directory tagged for another job is replaced
// before anything in it is cleared, given or offered.
func (s *Store) Prepare(id spec.JobID, tag string, uid, gid int) (latest Checkpoint, ok bool, err error) {
	latest, ok, _, err = s.prepare(id, tag, uid, gid, false)
	return latest, ok, err
}

// PrepareClaim is Prepare then Claim, in the same pass: the claim is
// made in the directory Prepare opened and found tagged tag. It is what
// the node agent's rank 0 does at each start. A claim that cannot be
// made is logged and the Mark is zero (the directory then stays after
// the job); the start goes on.
func (s *Store) PrepareClaim(id spec.JobID, tag string, uid, gid int) (latest Checkpoint, ok bool, m Mark, err error) {
	return s.prepare(id, tag, uid, gid, true)
}

func (s *Store) prepare(id spec.JobID, tag string, uid, gid int, claimIt bool) (latest Checkpoint, ok bool, m Mark, err error) {
	jd, made, m, err := s.openTaggedClaim(id, tag, true, claimIt)
	if err != nil {
		return Checkpoint{}, false, Mark{}, fmt.Errorf("create checkpoint dir of job %d: %w", id, err)
	}
	defer jd.Close()
	if err := s.staging(id, jd, !made, uid, gid); err != nil {
		return Checkpoint{}, false, Mark{}, err
	}
	var names []string
	if !made {
		if names, err = jd.Names(); err != nil {
			return Checkpoint{}, false, Mark{}, fmt.Errorf("list checkpoints of job %d: %w", id, err)
		}
	}
	if claimIt && m == (Mark{}) {
		var cerr error
		if m, cerr = claim(jd, names); cerr != nil {
			// The start goes on; only the removal at its end is lost.
			s.log.Warn("mark the job's checkpoint directory as this attempt's; it stays after the job", "job_id", uint64(id), "err", cerr)
		}
	}
	if made {
		return Checkpoint{}, false, m, nil
	}
	valid, _, err := s.scanNames(id, jd, names)
	if err != nil || len(valid) == 0 {
		return Checkpoint{}, false, m, err
	}
	return valid[len(valid)-1], true, m, nil
}

// PrepareSlot makes a checkpoint directory before its job is known: the
// root's entry name (0711, the agent's) with an empty staging directory
// given to uid:gid (none when uid is negative), for a container prepared
// ahead of its job to bind; AdoptSlot names it for the job that claims
// the container, RemoveSlot removes it if none does. name must not be a
// job id (digits only). It returns the slot's directory.
func (s *Store) PrepareSlot(name string, uid, gid int) (string, error) {
	if err := slotName(name); err != nil {
		return "", err
	}
	root, err := safefs.OpenDir(s.root)
	if err != nil {
		return "", fmt.Errorf("prepare checkpoint slot %s: %w", name, err)
	}
	defer root.Close()
	if err := root.RemoveAll(name); err != nil {
		return "", fmt.Errorf("prepare checkpoint slot %s: %w", name, err)
	}
	jd, err := root.Mkdir(name, 0o711)
	if err != nil {
		return "", fmt.Errorf("prepare checkpoint slot %s: %w", name, err)
	}
	defer jd.Close()
	st, err := jd.Mkdir(stagingName, 0o700)
	if err != nil {
		return "", fmt.Errorf("prepare checkpoint slot %s: %w", name, err)
	}
	defer st.Close()
	if uid >= 0 {
		if err := st.Chown(uid, gid); err != nil {
			return "", fmt.Errorf("prepare checkpoint slot %s: give staging dir to %d:%d: %w", name, uid, gid, err)
		}
	}
	return filepath.Join(s.root, name), nil
}

// AdoptSlot makes slot name job id's checkpoint directory (a rename, so
// a container that binds the slot keeps it), tagged tag (none when ""),
// the tag written before the rename. It fails with an error wrapping
// fs.ErrExist, and changes nothing but the slot's tag, if the job has
// one already.
func (s *Store) AdoptSlot(name string, id spec.JobID, tag string) error {
	if err := slotName(name); err != nil {
		return err
	}
	if err := validTag(tag); err != nil {
		return err
	}
	root, err := safefs.OpenDir(s.root)
	if err != nil {
		return fmt.Errorf("adopt checkpoint slot %s for job %d: %w", name, id, err)
	}
	defer root.Close()
	if tag != "" {
		slot, err := root.OpenDir(name)
		if err == nil {
			var have string
			have, err = writeTag(slot, tag)
			slot.Close()
			if err == nil && have != tag {
				err = fmt.Errorf("slot is tagged %q already", have)
			}
		}
		if err != nil {
			return fmt.Errorf("adopt checkpoint slot %s for job %d: %w", name, id, err)
		}
	}
	if err := root.RenameNoReplace(name, root, strconv.FormatUint(uint64(id), 10)); err != nil {
		return fmt.Errorf("adopt checkpoint slot %s for job %d: %w", name, id, err)
	}
	if err := root.Sync(); err != nil {
		return fmt.Errorf("adopt checkpoint slot %s for job %d: %w", name, id, err)
	}
	return nil
}

// RemoveSlot removes slot name; a missing one is not an error.
func (s *Store) RemoveSlot(name string) error {
	if err := slotName(name); err != nil {
		return err
	}
	if err := s.removeAll(name); err != nil {
		return fmt.Errorf("remove checkpoint slot %s: %w", name, err)
	}
	return nil
}

// slotName refuses a slot name that is a job's directory name.
func slotName(name string) error {
	if name == "" || strings.Trim(name, "0123456789") == "" {
		return fmt.Errorf("checkpoint slot name %q: must not be empty or digits only (a job's directory)", name)
	}
	return nil
}

// raceRetries bounds how often Staging and Join try again after losing a
// race with each other on a checkpoint root shared by a gang's nodes.
const raceRetries = 100

// Join is Staging for the ranks of a gang other than the one that seals:
// it creates job id's directory and staging directory if missing (giving
// a new staging directory to uid:gid unless uid is negative) and clears
// nothing, since the sealing rank may be using it. It returns the staging
// directory's path. tag is as Prepare's: a directory tagged for another
// job is replaced, so Latest afterwards offers only the job's own.
func (s *Store) Join(id spec.JobID, tag string, uid, gid int) (string, error) {
	jd, _, err := s.openTagged(id, tag, true)
	if err != nil {
		return "", fmt.Errorf("create checkpoint dir of job %d: %w", id, err)
	}
	defer jd.Close()
	var st *safefs.Dir
	for try := 0; ; try++ {
		st, err = jd.Mkdir(stagingName, 0o700)
		// The sealing rank's Staging may clear the directory just made,
		// before it is opened; it makes its own next, so look again.
		if errors.Is(err, fs.ErrNotExist) && try < raceRetries {
			continue
		}
		break
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return s.stagingDir(id), nil
	case err != nil:
		return "", fmt.Errorf("create staging dir of job %d: %w", id, err)
	}
	defer st.Close()
	if uid >= 0 {
		if err := st.Chown(uid, gid); err != nil {
			return "", fmt.Errorf("chown staging dir of job %d to %d:%d: %w", id, uid, gid, err)
		}
	}
	return s.stagingDir(id), nil
}

// Chown gives job id's staging directory to the job's uid and gid so the job
// can write into it. The job directory above it stays the agent's, so the job
// cannot rename or delete sealed checkpoints.
func (s *Store) Chown(id spec.JobID, uid, gid uint32) error {
	st, err := s.openStaging(id)
	if err == nil {
		err = st.Chown(int(uid), int(gid))
		st.Close()
	}
	if err != nil {
		return fmt.Errorf("chown staging dir of job %d to %d:%d: %w", id, uid, gid, err)
	}
	return nil
}

// openStaging opens job id's staging directory.
func (s *Store) openStaging(id spec.JobID) (*safefs.Dir, error) {
	jd, err := s.openJob(id, false)
	if err != nil {
		return nil, err
	}
	defer jd.Close()
	return jd.OpenDir(stagingName)
}

// Ready reports whether job id has marked its staging directory complete by
// creating a regular file named .done in it.
func (s *Store) Ready(id spec.JobID) bool {
	// One lstat of <root>/<id>/staging/.done: only its last component is
	// the job's to make (staging/ is the user's, the directories above it
	// root's, 0711, and nothing but root adds entries to them), and
	// lstat does not follow it.
	var st unix.Stat_t
	err := unix.Fstatat(unix.AT_FDCWD, filepath.Join(s.stagingDir(id), doneName), &st, unix.AT_SYMLINK_NOFOLLOW)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// ready is Ready in job directory jd.
func ready(jd *safefs.Dir) bool {
	st, err := jd.OpenDir(stagingName)
	if err != nil {
		return false
	}
	defer st.Close()
	fi, err := st.Lstat(doneName)
	return err == nil && fi.IsRegular()
}

// ErrRefused is wrapped by MarkReady's error when the job left something
// other than a regular file at .done.
var ErrRefused = errors.New("checkpoint refused")

// MarkReady creates .done in job id's staging directory on the job's behalf.
// The agent calls it when the job exited with ExitCodeCheckpointed: the job
// can no longer write, so what is in staging is final. The job owns the
// directory: an existing regular .done is accepted as is, anything else
// there (a symlink, FIFO, device or directory) is refused, never opened,
// and a new .done is created with O_EXCL|O_NOFOLLOW. tag, when not "", is
// the job's: a directory tagged for another job (an old runner's job of
// an ID a reset controller gave to a new one) is refused with an error
// wrapping ErrOtherJob, so the new job's half-written staging is never
// marked complete.
func (s *Store) MarkReady(id spec.JobID, tag string) error {
	jd, _, err := s.openTagged(id, tag, false)
	if err != nil {
		return fmt.Errorf("mark staging dir of job %d ready: %w", id, err)
	}
	st, err := jd.OpenDir(stagingName)
	jd.Close()
	if err != nil {
		return fmt.Errorf("mark staging dir of job %d ready: %w", id, err)
	}
	defer st.Close()
	if err := markReady(st); err != nil {
		return fmt.Errorf("mark staging dir of job %d ready: %w", id, err)
	}
	return nil
}

// markReady is MarkReady in the open staging directory st (the job's).
func markReady(st *safefs.Dir) error {
	for try := 0; ; try++ {
		fi, err := st.Lstat(doneName)
		switch {
		case err == nil && fi.IsRegular():
			return nil
		case err == nil:
			return fmt.Errorf("%w: %s is a %s, not a regular file; a job marks its checkpoint complete with a plain file (touch \"$GPUD_CHECKPOINT_DIR/%s\") or by exiting %d",
				ErrRefused, filepath.Join(st.Path(), doneName), fi.Type(), doneName, ExitCodeCheckpointed)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		f, err := st.Create(doneName, 0o600)
		if errors.Is(err, fs.ErrExist) && try == 0 {
			continue // appeared meanwhile: look at what it is
		}
		if err != nil {
			return err
		}
		return f.Close()
	}
}

// Seal turns job id's staging directory into the next numbered checkpoint:
// it checks that the job marked it ready, hashes and fsyncs every file and
// directory, writes and fsyncs MANIFEST.json, renames the directory to
// ckpt-<seq> and fsyncs the job directory and the store's root. It then
// removes checkpoints that do not verify and all but the newest keep that
// do.
//
// Seal refuses staging directories holding anything but regular files,
// directories and symlinks that stay inside the checkpoint; the error names
// the path; the refused staging directory stays, without .done, for the
// next Staging to clear. After Seal the job has no staging directory until
// Staging is called again.
func (s *Store) Seal(id spec.JobID) (Checkpoint, error) { return s.SealUnless(id, "", nil) }

// SealUnless is Seal that asks fenced, when not nil, just before the
// rename that makes the checkpoint visible, and seals nothing when it
// returns an error (wrapped in the one returned). The node agent passes
// its self-fence: an agent cut off from the controller must not add a
// checkpoint to a lineage that a requeued attempt elsewhere may own now,
// however long hashing the files took. tag, when not "", is the job's
// (see openTagged): a directory tagged for another job (an old runner
// of a job whose ID a reset controller gave to a new one) is refused
// with an error wrapping ErrOtherJob.
func (s *Store) SealUnless(id spec.JobID, tag string, fenced func() error) (Checkpoint, error) {
	st := s.stagingDir(id)
	jd, _, err := s.openTagged(id, tag, false)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	defer jd.Close()
	if !ready(jd) {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w: %s has no %s; the job must touch it after writing its files (or exit %d)",
			id, ErrNotReady, st, doneName, ExitCodeCheckpointed)
	}
	// .done is protocol, not data: it must not be in the manifest or the
	// restart directory, where a restarted job would take it for its own.
	if err := removeDone(jd); err != nil {
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
	dst := filepath.Join(s.jobDir(id), ckptName(seq))
	if fenced != nil {
		if err := fenced(); err != nil {
			return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
		}
	}
	// The tag, written unsynced at the start, is made durable before
	// the checkpoint is visible: a crash must not leave a sealed
	// checkpoint in a directory whose tag is lost (then taken as any
	// job's of the ID).
	if err := syncTag(jd); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	if err := jd.Rename(stagingName, jd, ckptName(seq)); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	if err := jd.Sync(); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	// The job's directory itself is made durable here, with the first
	// checkpoint it holds (a start does not fsync the root, see
	// openJobMade), so a sealed checkpoint survives a crash with it.
	if err := s.syncRoot(); err != nil {
		return Checkpoint{}, fmt.Errorf("seal checkpoint of job %d: %w", id, err)
	}
	kept, err := s.prune(id, jd)
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

// syncRoot fsyncs the store's root, so the job directories made in it
// survive a crash.
func (s *Store) syncRoot() error {
	root, err := safefs.OpenDir(s.root)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Sync()
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
	if err := s.removeAll(strconv.FormatUint(uint64(id), 10)); err != nil {
		return fmt.Errorf("remove checkpoints of job %d: %w", id, err)
	}
	return nil
}

// removeAll removes the root's entry name and what it holds, through
// descriptors (nothing a job left in it is followed); a missing one is
// not an error.
func (s *Store) removeAll(name string) error {
	root, err := safefs.OpenDir(s.root)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.RemoveAll(name)
}

// scanJob quick-verifies every ckpt-* directory of job id and returns the
// valid ones oldest first, and the names of the rest.
func (s *Store) scanJob(id spec.JobID) (valid []Checkpoint, invalid []string, err error) {
	jd, err := s.openJob(id, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints of job %d: %w", id, err)
	}
	defer jd.Close()
	return s.scanDir(id, jd)
}

// scanDir is scanJob in job id's open directory jd.
func (s *Store) scanDir(id spec.JobID, jd *safefs.Dir) (valid []Checkpoint, invalid []string, err error) {
	names, err := jd.Names()
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints of job %d: %w", id, err)
	}
	return s.scanNames(id, jd, names)
}

// scanNames is scanDir with jd's entries listed already (names).
func (s *Store) scanNames(id spec.JobID, jd *safefs.Dir, names []string) (valid []Checkpoint, invalid []string, err error) {
	seqs := seqsIn(jd, names)
	slices.Sort(seqs)
	for _, seq := range seqs {
		dir := filepath.Join(s.jobDir(id), ckptName(seq))
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
// ones, oldest first. jd is job id's open directory.
func (s *Store) prune(id spec.JobID, jd *safefs.Dir) ([]Checkpoint, error) {
	names, err := jd.Names()
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, trashPrefix) {
			if err := jd.RemoveAll(n); err != nil {
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
		trash := trashPrefix + name
		if err := jd.Rename(name, jd, trash); err != nil {
			return nil, fmt.Errorf("prune checkpoint %s: %w", name, err)
		}
		if err := jd.RemoveAll(trash); err != nil {
			return nil, fmt.Errorf("prune checkpoint %s: %w", name, err)
		}
	}
	if len(drop) > 0 {
		if err := jd.Sync(); err != nil {
			return nil, fmt.Errorf("prune checkpoints: %w", err)
		}
	}
	return valid, nil
}

// listSeqs returns the sequence numbers of the ckpt-* directories in job
// directory jd, in directory order.
func listSeqs(jd *safefs.Dir) ([]int, error) {
	names, err := jd.Names()
	if err != nil {
		return nil, err
	}
	return seqsIn(jd, names), nil
}

// seqsIn is listSeqs of jd's entries names.
func seqsIn(jd *safefs.Dir, names []string) []int {
	var seqs []int
	for _, n := range names {
		seq, ok := parseCkptName(n)
		if !ok {
			continue
		}
		if fi, err := jd.Lstat(n); err == nil && fi.IsDir() {
			seqs = append(seqs, seq)
		}
	}
	return seqs
}

// removeDone removes .done from jd's staging directory (whatever it is: an
// unlink never follows a symlink).
func removeDone(jd *safefs.Dir) error {
	st, err := jd.OpenDir(stagingName)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Remove(doneName)
}
