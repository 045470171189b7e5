package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// tamper changes the sealed checkpoint in dir and returns the dir
		// to verify (it may move it).
		tamper        func(t *testing.T, dir string) string
		wantQuickFail bool
		wantFullFail  bool
	}{
		{name: "untouched", tamper: func(t *testing.T, dir string) string { return dir }},
		{
			name: "extra file is not in the manifest and harmless",
			tamper: func(t *testing.T, dir string) string {
				writeTree(t, dir, map[string]string{"notes.txt": "x"})
				return dir
			},
		},
		{
			name: "same size, different content",
			tamper: func(t *testing.T, dir string) string {
				writeTree(t, dir, map[string]string{"step": "BBBB"})
				return dir
			},
			wantFullFail: true,
		},
		{
			name: "truncated file",
			tamper: func(t *testing.T, dir string) string {
				must(t, os.Truncate(filepath.Join(dir, "sub/model.pt"), 3))
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "missing file",
			tamper: func(t *testing.T, dir string) string {
				must(t, os.Remove(filepath.Join(dir, "step")))
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "file replaced by a symlink to identical content",
			tamper: func(t *testing.T, dir string) string {
				writeTree(t, dir, map[string]string{"copy": "AAAA"})
				must(t, os.Remove(filepath.Join(dir, "step")))
				must(t, os.Symlink("copy", filepath.Join(dir, "step")))
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "symlink retargeted",
			tamper: func(t *testing.T, dir string) string {
				must(t, os.Remove(filepath.Join(dir, "latest")))
				must(t, os.Symlink("sub/model.pt", filepath.Join(dir, "latest")))
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "no manifest",
			tamper: func(t *testing.T, dir string) string {
				must(t, os.Remove(filepath.Join(dir, manifestName)))
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "manifest not JSON",
			tamper: func(t *testing.T, dir string) string {
				must(t, os.Remove(filepath.Join(dir, manifestName)))
				writeTree(t, dir, map[string]string{manifestName: `{"version": 1, "files": [`})
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "manifest from a future gpud",
			tamper: func(t *testing.T, dir string) string {
				editManifest(t, dir, `"version": 1`, `"version": 2`)
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "manifest total does not add up",
			tamper: func(t *testing.T, dir string) string {
				editManifest(t, dir, `"bytes": 15`, `"bytes": 16`)
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "manifest path escapes",
			tamper: func(t *testing.T, dir string) string {
				editManifest(t, dir, `"path": "step"`, `"path": "../ckpt-00000001/step"`)
				return dir
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "directory renamed to another seq",
			tamper: func(t *testing.T, dir string) string {
				moved := filepath.Join(filepath.Dir(dir), "ckpt-00000009")
				must(t, os.Rename(dir, moved))
				return moved
			},
			wantQuickFail: true, wantFullFail: true,
		},
		{
			name: "copied outside the store keeps verifying",
			tamper: func(t *testing.T, dir string) string {
				moved := filepath.Join(filepath.Dir(dir), "restore")
				must(t, os.Rename(dir, moved))
				return moved
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, 1)
			c := sealFiles(t, s, 1, map[string]string{"step": "AAAA", "sub/model.pt": "weights0123", "latest": "->step"})
			dir := tc.tamper(t, c.Dir)
			for _, full := range []bool{false, true} {
				want := tc.wantQuickFail
				if full {
					want = tc.wantFullFail
				}
				got, err := Verify(dir, full)
				if want {
					if !errors.Is(err, ErrCorrupt) {
						t.Errorf("Verify(full=%v) error = %v, want ErrCorrupt", full, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("Verify(full=%v): %v", full, err)
					continue
				}
				if got.Seq != 1 || got.Files != 2 || got.Bytes != 15 || got.Dir != dir || !got.Created.Equal(testTime) {
					t.Errorf("Verify(full=%v) = %+v", full, got)
				}
			}
		})
	}
}

func TestCheckLink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path, target string
		wantOK       bool
	}{
		{"latest", "step-100", true},
		{"a/b", "../c", true},
		{"a/b/c", "../../d/e", true},
		{"a/b", "./c/../d", true},
		{"a/b", "../../c", false},
		{"latest", "..", false},
		{"latest", ".", true},
		{"latest", "/abs/path", false},
		{"latest", "", false},
	}
	for _, tc := range tests {
		err := checkLink(tc.path, tc.target)
		if (err == nil) != tc.wantOK {
			t.Errorf("checkLink(%q, %q) = %v, want ok=%v", tc.path, tc.target, err, tc.wantOK)
		}
	}
}

func editManifest(t *testing.T, dir, old, new string) {
	t.Helper()
	p := filepath.Join(dir, manifestName)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("manifest has no %q:\n%s", old, data)
	}
	must(t, os.Remove(p))
	must(t, os.WriteFile(p, []byte(strings.Replace(string(data), old, new, 1)), 0o444))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
