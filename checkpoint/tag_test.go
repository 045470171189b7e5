package checkpoint

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/safefs"
)

const (
	oldUID = 60001 // the user of job 7 under the controller's earlier state
	newUID = 60002 // the user of the new job 7 after the reset
)

// sealAs seals one checkpoint of job id tagged tag with files of uid
// (the job's user), made world-readable in a world-traversable staging
// directory: the worst a job can leave.
func sealAs(t *testing.T, s *Store, id spec.JobID, tag string, uid int, files map[string]string) Checkpoint {
	t.Helper()
	if _, _, err := s.Prepare(id, tag, uid, uid); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	st := s.stagingDir(id)
	writeTree(t, st, files)
	for p := range files {
		if err := os.Chown(filepath.Join(st, p), uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(st, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(st, 0o755); err != nil { // as the job's user may
		t.Fatal(err)
	}
	if err := s.MarkReady(id, ""); err != nil {
		t.Fatal(err)
	}
	c, err := s.SealUnless(id, tag, nil)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return c
}

// traversable opens a store in a temporary directory other users can
// traverse to (the test's own are 0700), as a node's checkpoint root is.
func traversable(t *testing.T, opts ...Option) *Store {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(filepath.Join(dir, "ckpt"), 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readAs reads path as uid (a real second user, with exec), or says why
// it cannot.
func readAs(t *testing.T, uid int, path string) (string, error) {
	t.Helper()
	cmd := exec.Command("cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", errors.New(strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// owners lists every entry under dir whose owner is uid.
func owners(t *testing.T, dir string, uid int) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if int(fi.Sys().(*syscall.Stat_t).Uid) == uid {
			got = append(got, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestTagAfterReset: a reset controller numbers jobs from 1 again, so a
// new job 7 (another submit time: another tag) meets the directory of the
// old job 7. Untagged (as before tags) the new job is offered the old
// job's checkpoint, and its user reads the old user's files; tagged, the
// old directory is moved aside and removed before anything is offered
// or given: the new job's user can neither read nor own any of it. The
// old job's runner, still stopping, can then neither seal into the new
// job's directory nor clear or remake its staging directory.
func TestTagAfterReset(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the jobs run as two other users")
	}
	oldTag, newTag := JobTag(1_700_000_000_000_000_001), JobTag(1_800_000_000_000_000_002)

	t.Run("untagged, as before tags: the old checkpoint is offered", func(t *testing.T) {
		s := traversable(t)
		old := sealAs(t, s, 7, "", oldUID, map[string]string{"weights.pt": "old user's data"})
		c, ok, err := s.Prepare(7, "", newUID, newUID)
		if err != nil || !ok || c.Dir != old.Dir {
			t.Fatalf("Prepare = %+v, %v, %v; want the old checkpoint (the behaviour tags fix)", c, ok, err)
		}
		if got, err := readAs(t, newUID, filepath.Join(c.Dir, "weights.pt")); got != "old user's data" {
			t.Fatalf("the new user reads %q, %v; want the old user's data (what tags prevent)", got, err)
		}
	})

	t.Run("tagged: never offered, read or owned", func(t *testing.T) {
		var logged bytes.Buffer
		s := traversable(t, WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
		old := sealAs(t, s, 7, oldTag, oldUID, map[string]string{"weights.pt": "old user's data"})
		oldFile := filepath.Join(old.Dir, "weights.pt")
		if got, err := readAs(t, newUID, oldFile); got != "old user's data" {
			t.Fatalf("before the new job: the file reads %q, %v as another user; the test needs it readable", got, err)
		}
		c, ok, err := s.Prepare(7, newTag, newUID, newUID)
		if err != nil || ok {
			t.Fatalf("Prepare = %+v, %v, %v; want no checkpoint", c, ok, err)
		}
		if got, err := readAs(t, newUID, oldFile); err == nil {
			t.Errorf("the new user reads the old checkpoint %s: %q", oldFile, got)
		}
		if got := owners(t, s.Root(), oldUID); len(got) != 0 {
			t.Errorf("the old user still owns %v under the checkpoint root", got)
		}
		if diff := cmp.Diff([]string{tagName, stagingName}, dirNames(t, s.JobDir(7))); diff != "" {
			t.Errorf("the new job's directory (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"7"}, dirNames(t, s.Root())); diff != "" {
			t.Errorf("the root keeps what was moved aside (-want +got):\n%s", diff)
		}
		if !strings.Contains(logged.String(), "earlier job with the same ID") || !strings.Contains(logged.String(), oldTag) {
			t.Errorf("the removal is not logged with the old tag: %q", logged.String())
		}
		fi, err := os.Stat(filepath.Join(s.JobDir(7), tagName))
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("tag file: %v, %v; want 0600 root's", fi, err)
		}

		// The new job writes its first checkpoint; the old runner stops
		// and tries to seal what its job left, and to restage.
		writeTree(t, s.stagingDir(7), map[string]string{"new.pt": "new"})
		if err := os.Chown(filepath.Join(s.stagingDir(7), "new.pt"), newUID, newUID); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReady(7, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SealUnless(7, oldTag, nil); !errors.Is(err, ErrOtherJob) {
			t.Errorf("the old runner's seal: %v; want ErrOtherJob", err)
		}
		if err := os.Remove(filepath.Join(s.stagingDir(7), doneName)); err != nil {
			t.Fatal(err)
		}
		// The old job exits 85: its runner marks "its" staging ready.
		if err := s.MarkReady(7, oldTag); !errors.Is(err, ErrOtherJob) {
			t.Errorf("the old runner's MarkReady: %v; want ErrOtherJob", err)
		}
		if s.Ready(7) {
			t.Error("the new job's staging is marked complete by the old runner")
		}
		if err := s.MarkReady(7, newTag); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Restage(7, oldTag, oldUID, oldUID); !errors.Is(err, ErrOtherJob) {
			t.Errorf("the old runner's restage: %v; want ErrOtherJob", err)
		}
		if diff := cmp.Diff([]string{".done", "new.pt"}, dirNames(t, s.stagingDir(7))); diff != "" {
			t.Errorf("the new job's staging after the old runner (-want +got):\n%s", diff)
		}
		ck, err := s.SealUnless(7, newTag, nil)
		if err != nil || ck.Seq != 1 {
			t.Fatalf("the new job's seal: %+v, %v; want its checkpoint 1", ck, err)
		}
		if _, err := s.Restage(7, newTag, newUID, newUID); err != nil {
			t.Fatal(err)
		}
		// Requeued (same tag): its own checkpoint is offered.
		c, ok, err = s.Prepare(7, newTag, newUID, newUID)
		if err != nil || !ok || c.Seq != 1 {
			t.Errorf("the requeued job's Prepare = %+v, %v, %v; want its checkpoint 1", c, ok, err)
		}
		// A removed directory is not made again by an old runner.
		if err := s.Remove(7); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Restage(7, oldTag, oldUID, oldUID); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("restage of a removed directory: %v; want fs.ErrNotExist", err)
		}
	})

	t.Run("another rank joins first", func(t *testing.T) {
		s := newTestStore(t, 2)
		sealAs(t, s, 7, oldTag, oldUID, map[string]string{"weights.pt": "old"})
		if _, err := s.Join(7, newTag, newUID, newUID); err != nil {
			t.Fatal(err)
		}
		if c, ok, err := s.Latest(7); err != nil || ok {
			t.Errorf("Latest after Join = %+v, %v, %v; want none", c, ok, err)
		}
		if got := owners(t, s.Root(), oldUID); len(got) != 0 {
			t.Errorf("the old user still owns %v", got)
		}
	})

	t.Run("untagged directory of an older agent stays the job's", func(t *testing.T) {
		s := newTestStore(t, 2)
		old := sealAs(t, s, 7, "", newUID, map[string]string{"weights.pt": "mine"})
		c, ok, err := s.Prepare(7, newTag, newUID, newUID)
		if err != nil || !ok || c.Dir != old.Dir {
			t.Fatalf("Prepare = %+v, %v, %v; want the untagged directory's checkpoint", c, ok, err)
		}
		if _, err := s.SealUnless(7, oldTag, nil); !errors.Is(err, ErrOtherJob) {
			t.Errorf("the directory is not tagged for the job after Prepare: seal with another tag: %v", err)
		}
	})

	t.Run("adopted slot", func(t *testing.T) {
		s := newTestStore(t, 2)
		if _, err := s.PrepareSlot("gpud-prep-1-n1", newUID, newUID); err != nil {
			t.Fatal(err)
		}
		if err := s.AdoptSlot("gpud-prep-1-n1", 7, newTag); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SealUnless(7, oldTag, nil); !errors.Is(err, ErrOtherJob) {
			t.Errorf("adopted slot not tagged: seal with another tag: %v", err)
		}
		if c, ok, err := s.Prepare(7, newTag, newUID, newUID); err != nil || ok {
			t.Errorf("Prepare of the adopted slot's job = %+v, %v, %v", c, ok, err)
		}
		if diff := cmp.Diff([]string{tagName, stagingName}, dirNames(t, s.JobDir(7))); diff != "" {
			t.Errorf("the adopted directory was replaced or changed (-want +got):\n%s", diff)
		}
	})
}

// TestRemoveUnsealed: a job's directory goes when the part that made its
// staging directory ends with nothing sealed; it stays with a sealed
// checkpoint (a requeued attempt restarts from it), once another attempt
// has claimed it again (PrepareClaim, or Claim after adopting a slot), and
// when it is another job's.
func TestRemoveUnsealed(t *testing.T) {
	tag := JobTag(42)
	prepared := func(t *testing.T, s *Store) Mark {
		t.Helper()
		_, _, m, err := s.PrepareClaim(7, tag, -1, -1)
		if err != nil || m == (Mark{}) {
			t.Fatalf("PrepareClaim = %v, %v", m, err)
		}
		return m
	}
	t.Run("nothing sealed: removed, root left clean", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		if ok, err := s.RemoveUnsealed(7, m); !ok || err != nil {
			t.Fatalf("RemoveUnsealed = %v, %v; want removed", ok, err)
		}
		if diff := cmp.Diff([]string{}, dirNames(t, s.Root())); diff != "" {
			t.Errorf("root after removal (-want +got):\n%s", diff)
		}
		if ok, err := s.RemoveUnsealed(7, m); ok || err != nil {
			t.Errorf("RemoveUnsealed of a missing directory = %v, %v; want false, nil", ok, err)
		}
	})
	t.Run("what the job left in staging: removed", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		writeTree(t, s.stagingDir(7), map[string]string{"half.pt": "never sealed", "d/e/f": "deep"})
		if err := os.Symlink("/etc", filepath.Join(s.stagingDir(7), "link")); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RemoveUnsealed(7, m); !ok || err != nil {
			t.Fatalf("RemoveUnsealed = %v, %v; want removed", ok, err)
		}
		if diff := cmp.Diff([]string{}, dirNames(t, s.Root())); diff != "" {
			t.Errorf("root after removal (-want +got):\n%s", diff)
		}
		if _, err := os.Stat("/etc/passwd"); err != nil {
			t.Errorf("the symlink's target went with it: %v", err)
		}
	})
	t.Run("sealed: kept", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		writeTree(t, s.stagingDir(7), map[string]string{"a": "1"})
		if err := s.MarkReady(7, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SealUnless(7, tag, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Restage(7, tag, -1, -1); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RemoveUnsealed(7, m); ok || err != nil {
			t.Fatalf("RemoveUnsealed (first mark) = %v, %v; want kept", ok, err)
		}
		if c, ok, err := s.Latest(7); !ok || err != nil || c.Seq != 1 {
			t.Errorf("Latest = %+v, %v, %v; want the sealed checkpoint", c, ok, err)
		}
	})
	t.Run("a ckpt-* of any kind: kept", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		if err := os.WriteFile(filepath.Join(s.JobDir(7), ckptName(3)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RemoveUnsealed(7, m); ok || err != nil {
			t.Fatalf("RemoveUnsealed = %v, %v; want kept", ok, err)
		}
	})
	t.Run("claimed again by another attempt: kept", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		again := prepared(t, s)
		if again == m {
			t.Fatal("a second claim kept the first's mark")
		}
		if ok, err := s.RemoveUnsealed(7, m); ok || err != nil {
			t.Fatalf("RemoveUnsealed with the first attempt's mark = %v, %v; want kept", ok, err)
		}
		// Claim (after adopting a slot) replaces the claim as well.
		third, err := s.Claim(7, tag)
		if err != nil || third == again || third == (Mark{}) {
			t.Fatalf("Claim = %v, %v", third, err)
		}
		if ok, err := s.RemoveUnsealed(7, again); ok || err != nil {
			t.Fatalf("RemoveUnsealed with the second attempt's mark = %v, %v; want kept", ok, err)
		}
		if ok, err := s.RemoveUnsealed(7, third); !ok || err != nil {
			t.Fatalf("RemoveUnsealed with the newest attempt's mark = %v, %v; want removed", ok, err)
		}
	})
	t.Run("claimed by an agent before claims by name: kept until claimed again", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		if err := os.WriteFile(filepath.Join(s.JobDir(7), oldClaimName), []byte("0123456789abcdef"), 0o600); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RemoveUnsealed(7, m); ok || err != nil {
			t.Fatalf("RemoveUnsealed beside an old agent's claim = %v, %v; want kept", ok, err)
		}
		again := prepared(t, s)
		if diff := cmp.Diff([]string{again.name(), tagName, stagingName}, dirNames(t, s.JobDir(7))); diff != "" {
			t.Errorf("after a new claim (-want +got):\n%s", diff)
		}
		if ok, err := s.RemoveUnsealed(7, again); !ok || err != nil {
			t.Fatalf("RemoveUnsealed = %v, %v; want removed", ok, err)
		}
	})
	t.Run("another job's now, or no mark: kept", func(t *testing.T) {
		s := newTestStore(t, 2)
		m := prepared(t, s)
		if ok, err := s.RemoveUnsealed(7, Mark{}); ok || err != nil {
			t.Errorf("RemoveUnsealed without a mark = %v, %v; want kept", ok, err)
		}
		// A reset controller's job 7 replaces the directory.
		if _, _, err := s.Prepare(7, JobTag(43), -1, -1); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RemoveUnsealed(7, m); ok || err != nil {
			t.Errorf("RemoveUnsealed of the earlier job 7 = %v, %v; want the new job's kept", ok, err)
		}
		if have := tagOf(t, s, 7); have != JobTag(43) {
			t.Errorf("job 7's directory is tagged %q, want the new job's %q", have, JobTag(43))
		}
		if _, err := os.Stat(s.stagingDir(7)); err != nil {
			t.Errorf("the new job's staging gone: %v", err)
		}
		if _, err := s.Claim(7, tag); !errors.Is(err, ErrOtherJob) {
			t.Errorf("Claim of another job's directory = %v, want ErrOtherJob", err)
		}
	})
}

// tagOf reads job id's tag as the store does.
func tagOf(t *testing.T, s *Store, id spec.JobID) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.JobDir(id), tagName))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// TestClaimTagKeepsTheFirstTag: the claim that tags a directory just made
// (PrepareClaim) never replaces a tag another rank wrote first, and the
// tag it writes is whole when it appears (a hard link of the claim).
func TestClaimTagKeepsTheFirstTag(t *testing.T) {
	s := newTestStore(t, 2)
	if err := os.Mkdir(s.JobDir(7), 0o711); err != nil {
		t.Fatal(err)
	}
	jd, err := safefs.OpenDir(s.JobDir(7))
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	m, have, err := claimTag(jd, JobTag(42))
	if err != nil || have != JobTag(42) || m == (Mark{}) {
		t.Fatalf("claimTag = %v, %q, %v; want a mark and the tag", m, have, err)
	}
	if diff := cmp.Diff([]string{m.name(), tagName}, dirNames(t, s.JobDir(7))); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	// Another rank (or attempt) tags second: the first tag stays.
	m2, have, err := claimTag(jd, JobTag(43))
	if err != nil || have != JobTag(42) {
		t.Fatalf("second claimTag = %q, %v; want the first tag %q", have, err, JobTag(42))
	}
	if tagOf(t, s, 7) != JobTag(42) {
		t.Errorf("tag = %q, want %q", tagOf(t, s, 7), JobTag(42))
	}
	// The first claim's file is the tag's: a later claim removes it, the
	// tag stays.
	if _, err := claim(jd, []string{m.name(), m2.name(), tagName}); err != nil {
		t.Fatal(err)
	}
	if tagOf(t, s, 7) != JobTag(42) {
		t.Errorf("tag after a later claim = %q, want %q", tagOf(t, s, 7), JobTag(42))
	}
}
