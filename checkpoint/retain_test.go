package checkpoint

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// stepClock is a clock tests move by hand.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// TestSealed: only job directories holding a ckpt-* are listed, oldest
// change first (Touch), bounded, without the jobs skip names, with
// their tags; a directory with nothing sealed, a slot and a file in the
// root are not.
func TestSealed(t *testing.T) {
	clk := &stepClock{t: testTime}
	s, err := New(t.TempDir(), 2, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	sealAs(t, s, 1, JobTag(100), -1, map[string]string{"a": "1"})
	sealAs(t, s, 3, "", -1, map[string]string{"a": "3"})
	sealAs(t, s, 4, JobTag(400), -1, map[string]string{"a": "4"})
	sealAs(t, s, 5, JobTag(500), -1, map[string]string{"a": "5"})
	if _, _, err := s.Prepare(2, JobTag(200), -1, -1); err != nil { // nothing sealed: listed too
		t.Fatal(err)
	}
	if _, err := s.PrepareSlot("slot-a", -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Root(), "6"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Ends: 4 first, then 1, then 3.
	for i, id := range []spec.JobID{4, 1, 3, 5, 2} {
		clk.set(testTime.Add(time.Duration(i+1) * time.Hour))
		if err := s.Touch(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Touch(99); err != nil { // missing: not an error
		t.Errorf("Touch of a missing directory = %v", err)
	}
	skip := func(id spec.JobID) bool { return id == 5 }
	got, err := s.Sealed(0, skip)
	if err != nil {
		t.Fatal(err)
	}
	want := []SealedDir{
		{ID: 4, Tag: JobTag(400), Changed: testTime.Add(time.Hour)},
		{ID: 1, Tag: JobTag(100), Changed: testTime.Add(2 * time.Hour)},
		{ID: 3, Tag: "", Changed: testTime.Add(3 * time.Hour)},
		{ID: 2, Tag: JobTag(200), Changed: testTime.Add(5 * time.Hour)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sealed (-want +got):\n%s", diff)
	}
	got, err = s.Sealed(2, skip)
	if err != nil || len(got) != 2 || got[0].ID != 4 || got[1].ID != 1 {
		t.Errorf("Sealed(2) = %+v, %v; want jobs 4 and 1", got, err)
	}
}

// TestRemoveSealed: a directory is removed only when tagged as named and
// unchanged since before the cutoff; another tag or a younger change
// keeps it, a missing one is no error.
func TestRemoveSealed(t *testing.T) {
	clk := &stepClock{t: testTime}
	s, err := New(t.TempDir(), 2, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	sealAs(t, s, 7, JobTag(70), -1, map[string]string{"a": "7"})
	if err := s.Touch(7); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tag    string
		before time.Time
	}{
		{JobTag(71), testTime.Add(time.Hour)}, // another job's tag
		{"", testTime.Add(time.Hour)},         // untagged named, tagged found
		{JobTag(70), testTime},                // changed at the cutoff: young
	} {
		if ok, err := s.RemoveSealed(7, c.tag, c.before); ok || err != nil {
			t.Errorf("RemoveSealed(7, %q, %v) = %v, %v; want kept", c.tag, c.before, ok, err)
		}
		if _, err := os.Stat(s.JobDir(7)); err != nil {
			t.Fatalf("directory gone after RemoveSealed(7, %q, %v): %v", c.tag, c.before, err)
		}
	}
	if ok, err := s.RemoveSealed(7, JobTag(70), testTime.Add(time.Nanosecond)); !ok || err != nil {
		t.Errorf("RemoveSealed old enough = %v, %v; want removed", ok, err)
	}
	if names := dirNames(t, s.Root()); len(names) != 0 {
		t.Errorf("root after removal holds %q", names)
	}
	if ok, err := s.RemoveSealed(7, JobTag(70), testTime.Add(time.Hour)); ok || err != nil {
		t.Errorf("RemoveSealed of a missing directory = %v, %v; want false, nil", ok, err)
	}
}

// TestRemoveSealedAsJobUser: the job's user owns staging/ and the sealed
// checkpoints and plants links to another directory, FIFOs and
// unreadable directories there; it can neither change the job
// directory's mtime (root's, 0711) to make it look old or young, nor add
// entries to it. The removal follows none of what it planted.
func TestRemoveSealedAsJobUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs as a second user: needs root")
	}
	s := traversable(t)
	victimDir, victim := plantVictim(t)
	ck := sealAs(t, s, 7, JobTag(42), oldUID, map[string]string{"a": "x"})
	if _, err := s.Restage(7, JobTag(42), oldUID, oldUID); err != nil {
		t.Fatal(err)
	}
	jd, st := s.JobDir(7), s.stagingDir(7)
	sh := shAsJobUser
	for _, dir := range []string{st, ck.Dir} {
		if out, err := sh(`set -e; cd '` + dir + `'
ln -s '` + victimDir + `' link; ln -s '` + victim + `' file-link; mkfifo fifo
mkdir -p p/q/r; ln -s '` + victimDir + `' p/q/r/up
chmod 000 p/q
chmod 000 .`); err != nil {
			t.Fatalf("planting in %s as uid %d: %v: %s", dir, oldUID, err, out)
		}
	}
	for _, try := range []string{
		"touch -d 2000-01-01 " + jd,
		"touch " + jd,
		"touch " + filepath.Join(jd, ".job"),
		"mkdir " + filepath.Join(jd, ckptName(9)),
		"rm -rf " + jd,
	} {
		if out, err := sh(try); err == nil {
			t.Errorf("as uid %d, %q succeeded (%s); want it refused", oldUID, try, out)
		}
	}
	within(t, "RemoveSealed", func() {
		ok, err := s.RemoveSealed(7, JobTag(42), time.Now().Add(time.Minute))
		if !ok || err != nil {
			t.Errorf("RemoveSealed = %v, %v; want removed", ok, err)
		}
	})
	if names := dirNames(t, s.Root()); len(names) != 0 {
		t.Errorf("root after removal holds %q", names)
	}
	checkVictimKept(t, victimDir, victim)
}
