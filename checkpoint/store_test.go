package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

var testTime = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func newTestStore(t *testing.T, keep int) *Store {
	t.Helper()
	s, err := New(t.TempDir(), keep, WithClock(func() time.Time { return testTime }))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// writeTree creates files (path → content) under dir; a content starting
// with "->" makes a symlink to the rest.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// sealFiles runs one whole protocol round: staging, the job's files, .done,
// Seal.
func sealFiles(t *testing.T, s *Store, id spec.JobID, files map[string]string) Checkpoint {
	t.Helper()
	st, err := s.Staging(id)
	if err != nil {
		t.Fatalf("Staging: %v", err)
	}
	writeTree(t, st, files)
	if err := s.MarkReady(id, ""); err != nil {
		t.Fatalf("MarkReady: %v", err)
	}
	c, err := s.Seal(id)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return c
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		root    string // relative to a temp dir; "" stays empty
		keep    int
		wantErr error
	}{
		{name: "creates nested root", root: "a/b/ckpt", keep: 1},
		{name: "keep 0", root: "r", keep: 0, wantErr: spec.ErrInvalid},
		{name: "negative keep", root: "r", keep: -3, wantErr: spec.ErrInvalid},
		{name: "empty root", root: "", keep: 2, wantErr: spec.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := tc.root
			if root != "" {
				root = filepath.Join(t.TempDir(), root)
			}
			s, err := New(root, tc.keep)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("New(%q, %d) error = %v, want %v", root, tc.keep, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			fi, err := os.Stat(s.Root())
			if err != nil || !fi.IsDir() {
				t.Fatalf("root %s not created: %v", s.Root(), err)
			}
		})
	}
}

func TestStaging(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(t *testing.T, s *Store)
	}{
		{name: "first attempt"},
		{
			name: "leftovers of an interrupted attempt are removed",
			setup: func(t *testing.T, s *Store) {
				st, err := s.Staging(7)
				if err != nil {
					t.Fatal(err)
				}
				writeTree(t, st, map[string]string{"half.pt": "xx", "sub/x": "y", "link": "->/etc", ".done": ""})
			},
		},
		{
			name: "after a seal",
			setup: func(t *testing.T, s *Store) {
				sealFiles(t, s, 7, map[string]string{"a": "1"})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, 2)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			st, err := s.Staging(7)
			if err != nil {
				t.Fatalf("Staging: %v", err)
			}
			if want := filepath.Join(s.Root(), "7", "staging"); st != want {
				t.Errorf("Staging = %s, want %s", st, want)
			}
			if diff := cmp.Diff([]string{}, dirNames(t, st)); diff != "" {
				t.Errorf("staging not empty (-want +got):\n%s", diff)
			}
			if s.Ready(7) {
				t.Errorf("Ready = true for an empty staging dir")
			}
			modes := map[string]os.FileMode{}
			for _, d := range []string{filepath.Dir(st), st} {
				fi, err := os.Stat(d)
				if err != nil {
					t.Fatal(err)
				}
				modes[filepath.Base(d)] = fi.Mode().Perm()
			}
			if diff := cmp.Diff(map[string]os.FileMode{"7": 0o711, "staging": 0o700}, modes); diff != "" {
				t.Errorf("permissions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChown(t *testing.T) {
	t.Parallel()
	type owner struct{ UID, GID uint32 }
	tests := []struct {
		name     string
		owner    owner
		needRoot bool
	}{
		{name: "own uid", owner: owner{uint32(os.Getuid()), uint32(os.Getgid())}},
		{name: "another user (nobody)", owner: owner{65534, 65534}, needRoot: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.needRoot && os.Geteuid() != 0 {
				t.Skip("SKIP: chown to another user needs root; run as root (CI does) to test it")
			}
			s := newTestStore(t, 1)
			st, err := s.Staging(3)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Chown(3, tc.owner.UID, tc.owner.GID); err != nil {
				t.Fatalf("Chown: %v", err)
			}
			fi, err := os.Stat(st)
			if err != nil {
				t.Fatal(err)
			}
			sys := fi.Sys().(*syscall.Stat_t)
			if diff := cmp.Diff(tc.owner, owner{sys.Uid, sys.Gid}); diff != "" {
				t.Errorf("staging owner (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("no staging dir", func(t *testing.T) {
		t.Parallel()
		s := newTestStore(t, 1)
		if err := s.Chown(3, 0, 0); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Chown without Staging: error = %v, want ErrNotExist", err)
		}
	})
}

func TestReady(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		mkdir string
		want  bool
	}{
		{name: "empty", want: false},
		{name: "files without .done", files: map[string]string{"model.pt": "w"}, want: false},
		{name: ".done", files: map[string]string{"model.pt": "w", ".done": ""}, want: true},
		{name: ".done in a subdir does not count", files: map[string]string{"sub/.done": ""}, want: false},
		{name: ".done as a directory", mkdir: ".done", want: false},
		{name: ".done as a symlink", files: map[string]string{"x": "", ".done": "->x"}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, 1)
			st, err := s.Staging(1)
			if err != nil {
				t.Fatal(err)
			}
			writeTree(t, st, tc.files)
			if tc.mkdir != "" {
				if err := os.Mkdir(filepath.Join(st, tc.mkdir), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got := s.Ready(1); got != tc.want {
				t.Errorf("Ready = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("MarkReady", func(t *testing.T) {
		t.Parallel()
		s := newTestStore(t, 1)
		if _, err := s.Staging(1); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReady(1, ""); err != nil {
			t.Fatalf("MarkReady: %v", err)
		}
		if !s.Ready(1) {
			t.Errorf("Ready = false after MarkReady")
		}
		// Idempotent: the job may have touched .done and exited 85.
		if err := s.MarkReady(1, ""); err != nil {
			t.Errorf("second MarkReady: %v", err)
		}
	})
}

func TestSeal(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, 3)
	files := map[string]string{
		"model.pt":            "weights",
		"optim/state.bin":     "adam moments",
		"optim/empty":         "",
		"latest":              "->optim/state.bin",
		"optim/model-link.pt": "->../model.pt",
	}
	got := sealFiles(t, s, 42, files)
	jd := filepath.Join(s.Root(), "42")
	want := Checkpoint{Seq: 1, Dir: filepath.Join(jd, "ckpt-00000001"), Created: testTime, Bytes: int64(len("weights") + len("adam moments")), Files: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Seal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ckpt-00000001"}, dirNames(t, jd)); diff != "" {
		t.Errorf("job dir after Seal (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(filepath.Join(got.Dir, ".done")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".done in sealed checkpoint: Lstat error = %v, want ErrNotExist", err)
	}
	data, err := os.ReadFile(filepath.Join(got.Dir, "MANIFEST.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("decode manifest: %v\n%s", err, data)
	}
	wantM := manifest{
		Version: 1, JobID: 42, Seq: 1, Created: testTime, Bytes: want.Bytes,
		Files: []manifestFile{
			{Path: "model.pt", Size: 7, Mode: "0640", SHA256: sha("weights")},
			{Path: "optim/empty", Size: 0, Mode: "0640", SHA256: sha("")},
			{Path: "optim/state.bin", Size: 12, Mode: "0640", SHA256: sha("adam moments")},
		},
		Links: []manifestLink{
			{Path: "latest", Target: "optim/state.bin"},
			{Path: "optim/model-link.pt", Target: "../model.pt"},
		},
	}
	if diff := cmp.Diff(wantM, m); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	latest, ok, err := s.Latest(42)
	if err != nil || !ok {
		t.Fatalf("Latest = _, %v, %v; want a checkpoint", ok, err)
	}
	if diff := cmp.Diff(want, latest); diff != "" {
		t.Errorf("Latest (-want +got):\n%s", diff)
	}
	if _, err := Verify(got.Dir, true); err != nil {
		t.Errorf("Verify(full) of a fresh checkpoint: %v", err)
	}
	if content, err := os.ReadFile(filepath.Join(got.Dir, "latest")); err != nil || string(content) != "adam moments" {
		t.Errorf("read through symlink in checkpoint = %q, %v", content, err)
	}
}

func TestSealRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		special func(t *testing.T, staging string) // makes what writeTree cannot
		noDone  bool
		wantErr error
		wantMsg string // a substring naming the offending path
	}{
		{name: "no .done", files: map[string]string{"model.pt": "w"}, noDone: true, wantErr: ErrNotReady, wantMsg: "has no .done"},
		{name: "absolute symlink", files: map[string]string{"data": "->/etc/passwd"}, wantErr: spec.ErrInvalid, wantMsg: "staging: data -> /etc/passwd"},
		{name: "symlink escaping", files: map[string]string{"a/b": "->../../x"}, wantErr: spec.ErrInvalid, wantMsg: "staging: a/b -> ../../x"},
		{name: "symlink to the job dir", files: map[string]string{"up": "->.."}, wantErr: spec.ErrInvalid, wantMsg: "points outside"},
		{name: "reserved manifest name", files: map[string]string{"MANIFEST.json": "{}"}, wantErr: spec.ErrInvalid, wantMsg: "staging: MANIFEST.json"},
		{
			name:  "fifo",
			files: map[string]string{"model.pt": "w"},
			special: func(t *testing.T, st string) {
				if err := syscall.Mkfifo(filepath.Join(st, "sub", "pipe"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: spec.ErrInvalid, wantMsg: "staging: sub/pipe is a named pipe",
		},
		{
			name: "character device",
			special: func(t *testing.T, st string) {
				// /dev/null's numbers, 1:3.
				err := syscall.Mknod(filepath.Join(st, "sub", "null"), syscall.S_IFCHR|0o600, 1<<8|3)
				if errors.Is(err, syscall.EPERM) {
					t.Skip("SKIP: mknod needs CAP_MKNOD; run as root (CI does) to test device rejection")
				}
				if err != nil {
					t.Fatal(err)
				}
			},
			wantErr: spec.ErrInvalid, wantMsg: "staging: sub/null is a character device",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, 2)
			prev := sealFiles(t, s, 9, map[string]string{"old": "previous"})
			st, err := s.Staging(9)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(st, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeTree(t, st, tc.files)
			if tc.special != nil {
				tc.special(t, st)
			}
			if !tc.noDone {
				if err := s.MarkReady(9, ""); err != nil {
					t.Fatal(err)
				}
			}
			_, err = s.Seal(9)
			if !errors.Is(err, tc.wantErr) || err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Seal error = %v; want %v containing %q", err, tc.wantErr, tc.wantMsg)
			}
			// The previous checkpoint is untouched and still the one offered.
			got, ok, err := s.Latest(9)
			if err != nil || !ok {
				t.Fatalf("Latest after refused Seal = _, %v, %v", ok, err)
			}
			if diff := cmp.Diff(prev, got); diff != "" {
				t.Errorf("Latest after refused Seal (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"ckpt-00000001", "staging"}, dirNames(t, filepath.Join(s.Root(), "9"))); diff != "" {
				t.Errorf("job dir after refused Seal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSealKeepsNewest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		keep      int
		seals     int
		wantNames []string
	}{
		{name: "keep 1", keep: 1, seals: 3, wantNames: []string{"ckpt-00000003"}},
		{name: "keep 2 of 4", keep: 2, seals: 4, wantNames: []string{"ckpt-00000003", "ckpt-00000004"}},
		{name: "keep more than sealed", keep: 5, seals: 2, wantNames: []string{"ckpt-00000001", "ckpt-00000002"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, tc.keep)
			for i := range tc.seals {
				c := sealFiles(t, s, 5, map[string]string{"step": strings.Repeat("x", i)})
				if c.Seq != i+1 {
					t.Fatalf("seal %d got Seq %d", i+1, c.Seq)
				}
			}
			if diff := cmp.Diff(tc.wantNames, dirNames(t, filepath.Join(s.Root(), "5"))); diff != "" {
				t.Errorf("job dir (-want +got):\n%s", diff)
			}
			list, err := s.List(5)
			if err != nil {
				t.Fatal(err)
			}
			var gotNames []string
			for _, c := range list {
				gotNames = append(gotNames, filepath.Base(c.Dir))
			}
			if diff := cmp.Diff(tc.wantNames, gotNames); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			latest, ok, err := s.Latest(5)
			if err != nil || !ok || latest.Seq != tc.seals || latest.Bytes != int64(tc.seals-1) {
				t.Errorf("Latest = %+v, %v, %v; want seq %d with %d bytes", latest, ok, err, tc.seals, tc.seals-1)
			}
		})
	}
}

// TestCrashRecovery simulates interruptions at each point of the protocol
// and checks that Latest offers only a fully sealed checkpoint and that the
// next Seal clears the debris.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// crash runs after ckpt-00000001 (file "w" = "one") was sealed.
		crash func(t *testing.T, s *Store, jobDir string)
		// wantLatest is the checkpoint offered right after the crash.
		wantLatest int
		// wantNames is the job dir after the next successful Seal.
		wantNames []string
	}{
		{
			name: "crash after the job touched .done, before Seal",
			crash: func(t *testing.T, s *Store, jd string) {
				writeTree(t, mustStaging(t, s), map[string]string{"w": "two", ".done": ""})
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000002"},
		},
		{
			name: "crash while the job writes, or after Seal removed .done",
			crash: func(t *testing.T, s *Store, jd string) {
				writeTree(t, mustStaging(t, s), map[string]string{"w": "two"})
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000002"},
		},
		{
			name: "crash after the manifest, before the rename",
			crash: func(t *testing.T, s *Store, jd string) {
				st := mustStaging(t, s)
				writeTree(t, st, map[string]string{"w": "two"})
				m, err := scan(st)
				if err != nil {
					t.Fatal(err)
				}
				m.Version, m.JobID, m.Seq, m.Created = manifestVersion, 1, 2, testTime
				if err := writeManifest(st, m); err != nil {
					t.Fatal(err)
				}
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000002"},
		},
		{
			name: "ckpt dir without a manifest",
			crash: func(t *testing.T, s *Store, jd string) {
				writeTree(t, filepath.Join(jd, "ckpt-00000005"), map[string]string{"w": "five"})
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000006"},
		},
		{
			name: "newer ckpt with a truncated file",
			crash: func(t *testing.T, s *Store, jd string) {
				c := sealFiles(t, s, 1, map[string]string{"w": "two", "big": "0123456789"})
				if err := os.Truncate(filepath.Join(c.Dir, "big"), 4); err != nil {
					t.Fatal(err)
				}
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000003"},
		},
		{
			name: "newer ckpt whose manifest lists a missing file",
			crash: func(t *testing.T, s *Store, jd string) {
				c := sealFiles(t, s, 1, map[string]string{"w": "two", "gone": "g"})
				if err := os.Remove(filepath.Join(c.Dir, "gone")); err != nil {
					t.Fatal(err)
				}
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000003"},
		},
		{
			name: "newer ckpt with a truncated manifest",
			crash: func(t *testing.T, s *Store, jd string) {
				c := sealFiles(t, s, 1, map[string]string{"w": "two"})
				mp := filepath.Join(c.Dir, manifestName)
				fi, err := os.Stat(mp)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(mp, fi.Size()/2); err != nil {
					t.Fatal(err)
				}
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000003"},
		},
		{
			name: "every ckpt broken",
			crash: func(t *testing.T, s *Store, jd string) {
				if err := os.Remove(filepath.Join(jd, "ckpt-00000001", "w")); err != nil {
					t.Fatal(err)
				}
			},
			wantLatest: 0,
			wantNames:  []string{"ckpt-00000002"},
		},
		{
			name: "crash halfway through pruning",
			crash: func(t *testing.T, s *Store, jd string) {
				writeTree(t, filepath.Join(jd, "trash-ckpt-00000000"), map[string]string{"x": "half deleted"})
			},
			wantLatest: 1,
			wantNames:  []string{"ckpt-00000001", "ckpt-00000002"},
		},
		{
			name: "crash after the rename, before pruning",
			crash: func(t *testing.T, s *Store, jd string) {
				// keep is 2: three valid checkpoints mean pruning never ran.
				for _, w := range []string{"two", "three"} {
					st := mustStaging(t, s)
					writeTree(t, st, map[string]string{"w": w})
					seq := len(dirNames(t, jd))
					m, err := scan(st)
					if err != nil {
						t.Fatal(err)
					}
					m.Version, m.JobID, m.Seq, m.Created = manifestVersion, 1, seq, testTime
					if err := writeManifest(st, m); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(st, filepath.Join(jd, ckptName(seq))); err != nil {
						t.Fatal(err)
					}
				}
			},
			wantLatest: 3,
			wantNames:  []string{"ckpt-00000003", "ckpt-00000004"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, 2)
			sealFiles(t, s, 1, map[string]string{"w": "one"})
			jd := filepath.Join(s.Root(), "1")
			tc.crash(t, s, jd)

			got, ok, err := s.Latest(1)
			if err != nil {
				t.Fatalf("Latest: %v", err)
			}
			if tc.wantLatest == 0 {
				if ok {
					t.Fatalf("Latest = %+v, want none", got)
				}
			} else {
				if !ok || got.Seq != tc.wantLatest {
					t.Fatalf("Latest = %+v, %v; want seq %d", got, ok, tc.wantLatest)
				}
				// Whatever is offered must verify in full, not just by size.
				if _, err := Verify(got.Dir, true); err != nil {
					t.Errorf("offered checkpoint does not verify: %v", err)
				}
			}

			c := sealFiles(t, s, 1, map[string]string{"w": "next"})
			if diff := cmp.Diff(tc.wantNames, dirNames(t, jd)); diff != "" {
				t.Errorf("job dir after next Seal (-want +got):\n%s", diff)
			}
			if want := tc.wantNames[len(tc.wantNames)-1]; filepath.Base(c.Dir) != want {
				t.Errorf("next Seal made %s, want %s", c.Dir, want)
			}
		})
	}
}

func mustStaging(t *testing.T, s *Store) string {
	t.Helper()
	st, err := s.Staging(1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestLatestAndRemove(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, 2)
	if c, ok, err := s.Latest(77); err != nil || ok {
		t.Errorf("Latest of unknown job = %+v, %v, %v; want none, no error", c, ok, err)
	}
	if list, err := s.List(77); err != nil || len(list) != 0 {
		t.Errorf("List of unknown job = %v, %v; want empty", list, err)
	}
	sealFiles(t, s, 77, map[string]string{"a": "1"})
	sealFiles(t, s, 78, map[string]string{"b": "2"})
	// A manifest copied from another job's checkpoint is not this job's.
	other := filepath.Join(s.Root(), "78", "ckpt-00000001")
	forged := filepath.Join(s.Root(), "77", "ckpt-00000002")
	writeTree(t, forged, map[string]string{"b": "2"})
	data, err := os.ReadFile(filepath.Join(other, manifestName))
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"seq": 1`, `"seq": 2`, 1))
	if err := os.WriteFile(filepath.Join(forged, manifestName), data, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(forged, true); err != nil {
		t.Fatalf("forged checkpoint should verify on its own: %v", err)
	}
	if c, ok, err := s.Latest(77); err != nil || !ok || c.Seq != 1 {
		t.Errorf("Latest(77) = %+v, %v, %v; want seq 1, not job 78's manifest", c, ok, err)
	}

	for range 2 { // idempotent
		if err := s.Remove(77); err != nil {
			t.Fatalf("Remove: %v", err)
		}
	}
	if c, ok, err := s.Latest(77); err != nil || ok {
		t.Errorf("Latest after Remove = %+v, %v, %v; want none", c, ok, err)
	}
	names := dirNames(t, s.Root())
	slices.Sort(names)
	if diff := cmp.Diff([]string{"78"}, names); diff != "" {
		t.Errorf("root after Remove(77) (-want +got):\n%s", diff)
	}
}

// TestStagingJoinRace: the ranks of a gang start on several nodes at once
// and share the checkpoint root, so rank 0's Staging (clear, then create)
// runs while other ranks' Join creates what is missing. Neither may fail:
// a Join whose new directory the owner cleared before Join opened it, and
// a Staging that finds a directory a Join made after the clear, both try
// again. Failed before the fix within a few hundred rounds ("open
// directory ... staging: no such file or directory", found by the
// multi-host e2e test's 2-node job).
func TestStagingJoinRace(t *testing.T) {
	root := t.TempDir()
	owner, err := New(root, 2)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(root, 2) // another node's store on the same root
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		id := spec.JobID(i + 1)
		tag := JobTag(int64(i % 3)) // 0: untagged; both tag at once otherwise
		errs := make(chan error, 2)
		go func() {
			if i%2 == 1 { // Prepare: Staging without the first clear in a job dir it made
				_, _, err := owner.Prepare(id, tag, -1, -1)
				errs <- err
				return
			}
			_, err := owner.Staging(id)
			errs <- err
		}()
		go func() { _, err := other.Join(id, tag, -1, -1); errs <- err }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if _, err := os.Stat(owner.stagingDir(id)); err != nil {
			t.Fatalf("round %d: no staging dir after Staging and Join: %v", i, err)
		}
	}
}

// TestPrepare: Prepare leaves what Staging, Chown and Latest in turn
// leave (an empty staging directory, 0700, the user's; the newest sealed
// checkpoint), on a new job, after an interrupted attempt and after seals.
func TestPrepare(t *testing.T) {
	t.Parallel()
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534 // nobody: a real chown
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, s *Store)
		seq   int // newest sealed, 0: none
	}{
		{name: "first attempt"},
		{name: "leftovers of an interrupted attempt are removed", setup: func(t *testing.T, s *Store) {
			st, err := s.Staging(7)
			if err != nil {
				t.Fatal(err)
			}
			writeTree(t, st, map[string]string{"half.pt": "xx", "sub/x": "y", "link": "->/etc", ".done": ""})
		}},
		{name: "after seals, with leftovers", seq: 2, setup: func(t *testing.T, s *Store) {
			sealFiles(t, s, 7, map[string]string{"a": "1"})
			sealFiles(t, s, 7, map[string]string{"a": "2"})
			st, err := s.Staging(7)
			if err != nil {
				t.Fatal(err)
			}
			writeTree(t, st, map[string]string{"half.pt": "xx"})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, 2)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			c, ok, err := s.Prepare(7, "", uid, gid)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if ok != (tc.seq > 0) || c.Seq != tc.seq {
				t.Errorf("Prepare's newest checkpoint = %+v, %v; want seq %d", c, ok, tc.seq)
			}
			if want, _, _ := s.Latest(7); want != c {
				t.Errorf("Prepare's newest checkpoint %+v, Latest's %+v", c, want)
			}
			st := s.stagingDir(7)
			if diff := cmp.Diff([]string{}, dirNames(t, st)); diff != "" {
				t.Errorf("staging not empty (-want +got):\n%s", diff)
			}
			fi, err := os.Stat(st)
			if err != nil {
				t.Fatal(err)
			}
			sys := fi.Sys().(*syscall.Stat_t)
			if fi.Mode().Perm() != 0o700 || int(sys.Uid) != uid || int(sys.Gid) != gid {
				t.Errorf("staging is %v %d:%d, want 0700 %d:%d", fi.Mode().Perm(), sys.Uid, sys.Gid, uid, gid)
			}
		})
	}
}
