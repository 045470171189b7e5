package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestSlots: a slot made before its job is known becomes the job's
// directory by rename (so a bind of it follows), never over one the job
// has; names that are job ids are refused; RemoveSlot removes it.
func TestSlots(t *testing.T) {
	s, err := New(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := s.PrepareSlot("gpud-prep-1-n1", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "staging", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(filepath.Join(dir, "staging")) // as a container's bind holds it
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := s.AdoptSlot("gpud-prep-1-n1", 7, ""); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(s.JobDir(7), "staging", "f")); err != nil || string(b) != "x" {
		t.Errorf("job 7's staging after AdoptSlot: %q, %v; want the slot's file", b, err)
	}
	if names, _ := held.Readdirnames(-1); len(names) != 1 {
		t.Errorf("the held staging dir lists %v after the rename, want the file", names)
	}
	// Job 7 has a directory now: a second slot cannot take it.
	if _, err := s.PrepareSlot("gpud-prep-2-n1", -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AdoptSlot("gpud-prep-2-n1", 7, ""); !errors.Is(err, fs.ErrExist) {
		t.Errorf("AdoptSlot over job 7's directory = %v, want fs.ErrExist", err)
	}
	if b, err := os.ReadFile(filepath.Join(s.JobDir(7), "staging", "f")); err != nil || string(b) != "x" {
		t.Errorf("job 7's checkpoint dir changed by a refused AdoptSlot: %q, %v", b, err)
	}
	if err := s.RemoveSlot("gpud-prep-2-n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "gpud-prep-2-n1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("slot after RemoveSlot: %v, want gone", err)
	}
	for _, bad := range []string{"", "8", "0012"} {
		if _, err := s.PrepareSlot(bad, -1, 0); err == nil {
			t.Errorf("PrepareSlot(%q) = nil error, want a refusal (a job's directory name)", bad)
		}
		if err := s.RemoveSlot(bad); err == nil {
			t.Errorf("RemoveSlot(%q) = nil error, want a refusal", bad)
		}
	}
}
