// Package wallclock is the wall clock of the daemons' own time keeping:
// the controller's (controller.New's default clock) and the node agent's
// (job time, node.Clock). It is time.Now, and for tests it can be stepped.
//
// Linux cannot step the wall clock of one network namespace (time
// namespaces offset only the monotonic and boot clocks), and stepping a
// shared machine's clock breaks everything else on it. So an end-to-end
// test steps one daemon's wall clock through this seam instead: a file
// named by GPUD_TEST_WALL_CLOCK_FILE holds an offset ("1h", "-1h", "0s")
// that the daemon follows (Follow). A step moves the wall reading only and
// keeps the monotonic one, as a real step of CLOCK_REALTIME does: time
// measured within the process with Sub, Since and timers is unmoved, and
// a wall time compared with one from another process, the disk or the
// wire is moved by the step, which is what such a test looks for.
//
// What this does not step: the time TLS, tokens and Raft read (time.Now
// in the standard library and dependencies). Those allow their own skew
// (auth.DefaultSkew; certificates are valid from an hour before they are
// made).
package wallclock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// EnvFile names the file a daemon follows for its test clock offset.
const EnvFile = "GPUD_TEST_WALL_CLOCK_FILE"

var offset atomic.Int64

// Now is time.Now stepped by the test offset (none outside tests).
func Now() time.Time {
	t := time.Now()
	if off := time.Duration(offset.Load()); off != 0 {
		return Stepped(t, off)
	}
	return t
}

// Offset is the test offset in force.
func Offset() time.Duration { return time.Duration(offset.Load()) }

// Set steps the clock to off from the real one (tests in process).
func Set(off time.Duration) { offset.Store(int64(off)) }

// layout is time.Time's representation (wall, ext, loc), stable since Go
// 1.9: with the hasMonotonic bit of wall set, ext is the monotonic
// reading. stepOK says the self-check at init found it so.
type layout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

var stepOK = func() bool {
	t := time.Now()
	s := moveWall(t, time.Hour)
	return unsafe.Sizeof(t) == unsafe.Sizeof(layout{}) && s.Sub(t) == 0 && s.Round(0).Sub(t.Round(0)) == time.Hour
}()

// Stepped is t as a clock stepped by off reads it: its wall reading
// moved by off and its monotonic reading kept (where the self-check
// failed, or t carries no monotonic reading: the wall reading alone).
func Stepped(t time.Time, off time.Duration) time.Time {
	if !stepOK {
		return t.Round(0).Add(off)
	}
	return moveWall(t, off)
}

func moveWall(t time.Time, off time.Duration) time.Time {
	s := t.Add(off) // both readings moved
	ps, pt := (*layout)(unsafe.Pointer(&s)), (*layout)(unsafe.Pointer(&t))
	const hasMonotonic = 1 << 63
	if ps.wall&hasMonotonic == 0 || pt.wall&hasMonotonic == 0 {
		return s.Round(0)
	}
	ps.ext = pt.ext // the monotonic reading as it was
	return s
}

// Follow reads the offset from path now and every 100 ms until ctx ends,
// logging each change. The file must be the daemon's user's own and
// writable by no one else, and not a symbolic link: anyone able to write
// it could move the daemon's clock.
func Follow(ctx context.Context, path string, log *slog.Logger) error {
	off, err := readOffset(path)
	if err != nil {
		return err
	}
	apply := func(off time.Duration) {
		if old := Offset(); old != off {
			Set(off)
			log.Warn("test wall clock stepped", "offset", off.String(), "from", old.String(), "file", path)
		}
	}
	apply(off)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		said := "" // the last error logged: each said once, not every 100 ms
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			off, err := readOffset(path)
			if err != nil {
				if err.Error() != said {
					said = err.Error()
					log.Error("test wall clock: offset kept", "offset", Offset().String(), "err", err)
				}
				continue
			}
			said = ""
			apply(off)
		}
	}()
	return nil
}

func readOffset(path string) (time.Duration, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, fmt.Errorf("%s=%s: %w", EnvFile, path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return 0, fmt.Errorf("%s=%s is not a regular file", EnvFile, path)
	case !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0:
		return 0, fmt.Errorf("%s=%s must belong to this daemon's user and be writable by no one else (it moves the daemon's clock)", EnvFile, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	off, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(EnvFile + "=" + path + ": " + err.Error() + ` (an offset like "1h", "-1h" or "0s")`)
	}
	return off, nil
}
