package wallclock

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A step moves the wall reading and keeps the monotonic one, as a real
// step of CLOCK_REALTIME does.
func TestStepMovesWallOnly(t *testing.T) {
	if !stepOK {
		t.Fatal("time.Time's layout is not what the step expects: the seam would step the monotonic clock too")
	}
	before := Now()
	Set(time.Hour)
	defer Set(0)
	after := Now()
	if d := after.Sub(before); d < 0 || d > time.Second {
		t.Errorf("monotonic: after.Sub(before) = %s; want about 0 (a wall step does not move durations)", d)
	}
	if d := after.Round(0).Sub(before.Round(0)); d < time.Hour || d > time.Hour+time.Second {
		t.Errorf("wall: %s between the readings; want about 1h", d)
	}
	if d := time.Until(after); d > time.Second || d < -time.Second {
		t.Errorf("time.Until(stepped now) = %s; want about 0 (timers run on the monotonic clock)", d)
	}
	Set(-time.Hour)
	if d := Now().Round(0).Sub(time.Now().Round(0)); d > -time.Hour+time.Second || d < -time.Hour-time.Second {
		t.Errorf("stepped back: wall %s from the real clock; want about -1h", d)
	}
}

func TestFollow(t *testing.T) {
	defer Set(0)
	p := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(p, []byte("-1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Follow(ctx, p, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if Offset() != -time.Hour {
		t.Fatalf("offset %s after Follow; want -1h read at once", Offset())
	}
	if err := os.WriteFile(p, []byte("30m"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for Offset() != 30*time.Minute {
		if time.Now().After(deadline) {
			t.Fatalf("offset %s 10 s after the file said 30m", Offset())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Anyone able to write the file could move the daemon's clock: a file
// others may write, a symbolic link or a bad offset is refused, saying so.
func TestFollowRefuses(t *testing.T) {
	defer Set(0)
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("1h"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o622); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("1h"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("an hour"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for path, want := range map[string]string{open: "writable by no one else", link: "symbolic link", bad: `like "1h"`} {
		err := Follow(context.Background(), path, log)
		if err == nil || !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), "too many levels") {
			t.Errorf("Follow(%s) = %v; want an error saying %q", filepath.Base(path), err, want)
		}
	}
	if Offset() != 0 {
		t.Errorf("offset %s after refused files; want 0", Offset())
	}
}
