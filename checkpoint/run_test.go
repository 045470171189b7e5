package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunDirs: a run directory is made only while the job has no
// directory (one that exists, even another job's, is the caller's to
// prepare), replaces a leftover of the same name, is marked ready as a
// staging directory is (a non-regular .done refused), becomes the
// staging directory of the job's directory made, tagged and claimed by
// AdoptRun, where it seals as any other; a job directory that appeared
// meanwhile is left alone and the run directory stays; RemoveRun walks
// what the job left without following it.
func TestRunDirs(t *testing.T) {
	s, err := New(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	const name = "run-gpud-7-1-n1"
	if _, ok := RunContainer(name); !ok {
		t.Fatalf("RunContainer(%q) refused", name)
	}
	for _, bad := range []string{"7", "run-", "run-a/b", "slot-1"} {
		if _, ok := RunContainer(bad); ok {
			t.Errorf("RunContainer(%q) accepted", bad)
		}
	}
	if _, _, err := s.PrepareRun("7", 7, -1, 0); err == nil {
		t.Error("PrepareRun of a job's directory name succeeded")
	}

	// A leftover of the same name (a start cut short), with a file.
	if err := os.MkdirAll(filepath.Join(s.Root(), name, "left"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir, ok, err := s.PrepareRun(name, 7, -1, 0)
	if err != nil || !ok || dir != filepath.Join(s.Root(), name) {
		t.Fatalf("PrepareRun = %q, %v, %v; want %s made", dir, ok, err, filepath.Join(s.Root(), name))
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("the run directory holds %v; want it empty (the leftover removed)", names)
	}
	if fi, _ := os.Lstat(dir); fi.Mode().Perm() != 0o700 || !s.RunExists(name) || s.RunExists("run-gpud-8-1-n1") {
		t.Errorf("run directory mode %v, exists %v; want 0700, there (and no other)", fi.Mode(), s.RunExists(name))
	}
	if s.RunReady(name) {
		t.Error("RunReady without .done")
	}

	// .done as a symlink is refused, never followed.
	outside := filepath.Join(t.TempDir(), "x")
	if err := os.Symlink(outside, filepath.Join(dir, doneName)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRunReady(name); !errors.Is(err, ErrRefused) || s.RunReady(name) {
		t.Errorf("MarkRunReady over a symlink = %v (ready %v); want ErrRefused", err, s.RunReady(name))
	}
	if _, err := os.Lstat(outside); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the symlink's target was made: %v", err)
	}
	os.Remove(filepath.Join(dir, doneName))
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRunReady(name); err != nil || !s.RunReady(name) {
		t.Fatalf("MarkRunReady = %v (ready %v)", err, s.RunReady(name))
	}

	// A job directory of the same ID now: another job's is replaced, the
	// job's own is left alone.
	other := s.JobDir(7)
	if err := os.MkdirAll(other, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, tagName), []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdoptRun(name, 7, "mine"); !errors.Is(err, ErrJobDirMade) || !s.RunExists(name) {
		t.Fatalf("AdoptRun with the job's directory there = %v (run there: %v); want ErrJobDirMade, the run directory kept", err, s.RunExists(name))
	}
	if _, ok, err := s.PrepareRun("run-gpud-7-2-n1", 7, -1, 0); ok || err != nil {
		t.Errorf("PrepareRun with the job's directory there = %v, %v; want nothing made (the caller prepares it)", ok, err)
	}
	m, err := s.AdoptRun(name, 7, "theirs") // the directory is tagged "mine": another job's
	if err != nil || m == (Mark{}) || s.RunExists(name) {
		t.Fatalf("AdoptRun = %v, %v (run there: %v); want a mark, the run directory moved", m, err, s.RunExists(name))
	}
	if tag, _ := os.ReadFile(filepath.Join(other, tagName)); strings.TrimSpace(string(tag)) != "theirs" {
		t.Errorf("job directory tagged %q, want theirs", tag)
	}
	ck, err := s.SealUnless(7, "theirs", nil)
	if err != nil || ck.Seq != 1 || ck.Bytes != 3 {
		t.Fatalf("SealUnless after AdoptRun = %+v, %v; want seq 1 of 3 bytes", ck, err)
	}
	if removed, err := s.RemoveUnsealed(7, m); removed || err != nil {
		t.Errorf("RemoveUnsealed of a sealed directory = %v, %v; want it kept", removed, err)
	}

	// RemoveRun follows nothing the job left.
	keep := t.TempDir()
	if err := os.WriteFile(filepath.Join(keep, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, ok, err = s.PrepareRun("run-gpud-8-1-n1", 8, -1, 0)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := os.Symlink(keep, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveRun("run-gpud-8-1-n1"); err != nil || s.RunExists("run-gpud-8-1-n1") {
		t.Fatalf("RemoveRun = %v (still there: %v)", err, s.RunExists("run-gpud-8-1-n1"))
	}
	if b, err := os.ReadFile(filepath.Join(keep, "f")); err != nil || string(b) != "x" {
		t.Errorf("the link's target: %q, %v; want it untouched", b, err)
	}
	if err := s.RemoveRun("run-gpud-8-1-n1"); err != nil {
		t.Errorf("RemoveRun of a missing one = %v", err)
	}
	runs, err := s.Runs()
	if err != nil || len(runs) != 0 {
		t.Errorf("Runs = %v, %v; want none", runs, err)
	}
	if dirs, err := s.Sealed(0, nil); err != nil || len(dirs) != 1 || dirs[0].ID != 7 {
		t.Errorf("Sealed = %+v, %v; want job 7's only", dirs, err)
	}
}

// TestEndRun: at its job's exit an empty run directory is removed at
// once (not ready, gone); one with a file the job left stays, not ready;
// one with .done stays, ready; a .done that is a symlink is not ready and
// is not followed; what the job left is untouched.
func TestEndRun(t *testing.T) {
	s, err := New(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(outside, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		left      map[string]string // file → content ("->" prefix: a symlink to outside)
		wantReady bool
		wantGone  bool
	}{
		{"empty", nil, false, true},
		{"a file left", map[string]string{"state": "abc"}, false, false},
		{"done", map[string]string{"state": "abc", doneName: ""}, true, false},
		{"done a symlink", map[string]string{doneName: "->"}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "run-gpud-" + strings.ReplaceAll(c.name, " ", "") + "-1-n1"
			dir, ok, err := s.PrepareRun(name, 9, -1, 0)
			if err != nil || !ok {
				t.Fatalf("PrepareRun: %v %v", ok, err)
			}
			for f, content := range c.left {
				if content == "->" {
					err = os.Symlink(outside, filepath.Join(dir, f))
				} else {
					err = os.WriteFile(filepath.Join(dir, f), []byte(content), 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			ready, gone := s.EndRun(name)
			if ready != c.wantReady || gone != c.wantGone {
				t.Errorf("EndRun = ready %v, gone %v; want %v, %v", ready, gone, c.wantReady, c.wantGone)
			}
			if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) != c.wantGone {
				t.Errorf("run directory after EndRun: %v; want gone %v", err, c.wantGone)
			}
			if b, err := os.ReadFile(outside); err != nil || string(b) != "mine" {
				t.Errorf("outside file now %q (%v)", b, err)
			}
			if err := s.RemoveRun(name); err != nil {
				t.Error(err)
			}
		})
	}
}
