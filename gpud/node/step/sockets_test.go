package step

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// askJob connects to the step socket at path as uid:gid (root: -1) and
// asks for a step of --het-group=1 of a job that has none: the answer
// names the job that served it. It returns that job's ID, or the error
// connecting.
func askJob(t *testing.T, path string, uid, gid int) (string, error) {
	t.Helper()
	type answer struct {
		job string
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		// This thread alone takes the caller's credentials (the kernel
		// keeps them per thread) and dies with the goroutine: it is
		// never unlocked.
		goruntime.LockOSThread()
		if uid >= 0 {
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
				ch <- answer{err: fmt.Errorf("setresgid: %w", e)}
				return
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
				ch <- answer{err: fmt.Errorf("setresuid: %w", e)}
				return
			}
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			unix.Close(fd)
			ch <- answer{err: err}
			return
		}
		f := os.NewFile(uintptr(fd), "client")
		defer f.Close()
		_ = f.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := f.Write([]byte(`{"args":["x"],"het_group":2}` + "\n")); err != nil {
			ch <- answer{err: err}
			return
		}
		m, err := api.ReadStepFrame(bufio.NewReader(f))
		if err != nil {
			ch <- answer{err: err}
			return
		}
		_, rest, ok := strings.Cut(m.Error, "job ")
		if m.Kind != api.StepError || !ok {
			ch <- answer{err: fmt.Errorf("answer %+v; want the refusal naming the job", m)}
			return
		}
		job, _, _ := strings.Cut(rest, " ")
		ch <- answer{job: job}
	}()
	a := <-ch
	return a.job, a.err
}

// sockAlloc is job id's steps (its user uid:gid) serving its step socket
// in dir.
func sockAlloc(t *testing.T, n *Node, h *fakeHost, id int, uid, gid int, dir string) (*Alloc, func()) {
	t.Helper()
	asg := &api.Assignment{Job: spec.Job{ID: spec.JobID(id), UID: uint32(uid), GID: uint32(gid)},
		Alloc: spec.Alloc{ID: fmt.Sprintf("%d.1", id), Nodes: []spec.NodeAlloc{{Node: "n1"}}}}
	al := testAlloc(t, n, h, asg, dir)
	return al, al.Serve(context.Background(), nil)
}

// TestJobSocketsAttacked: the jobs' step sockets share one acceptor, and
// each still reaches only its own job: a caller on job 7's socket is
// served by job 7, on job 8's by job 8; the socket is its job user's,
// mode 0600, so job 8's user cannot connect to job 7's (nor 7's to 8's),
// and another local user to neither; a closed socket refuses. Root only
// (the users are made up: 61001-61003).
func TestJobSocketsAttacked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the sockets are given to the jobs' users")
	}
	const alice, bob, mallory = 61001, 61002, 61003
	base := attackBase(t, "stepsock-")
	n, h := testNode("n1")
	stopNode := n.Run(context.Background())
	defer stopNode()
	dir7, dir8 := filepath.Join(base, "j7"), filepath.Join(base, "j8")
	_, stop7 := sockAlloc(t, n, h, 7, alice, alice, dir7)
	defer stop7()
	_, stop8 := sockAlloc(t, n, h, 8, bob, bob, dir8)
	defer stop8()
	sock7, sock8 := filepath.Join(dir7, SocketName), filepath.Join(dir8, SocketName)
	for _, c := range []struct {
		path     string
		uid      int
		mode     os.FileMode
		wantUser int
	}{{sock7, alice, 0o600, alice}, {sock8, bob, 0o600, bob}} {
		var st unix.Stat_t
		if err := unix.Lstat(c.path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o7777 != uint32(c.mode) || int(st.Uid) != c.wantUser {
			t.Errorf("%s: mode %o uid %d (%v); want a socket of mode %o, uid %d", c.path, st.Mode, st.Uid, err, c.mode, c.wantUser)
		}
	}
	for _, c := range []struct {
		who     string
		path    string
		uid     int
		wantJob string // "": refused
	}{
		{"root on job 7's", sock7, -1, "7"},
		{"root on job 8's", sock8, -1, "8"},
		{"job 7's user on its own", sock7, alice, "7"},
		{"job 8's user on its own", sock8, bob, "8"},
		{"job 8's user on job 7's", sock7, bob, ""},
		{"job 7's user on job 8's", sock8, alice, ""},
		{"another local user on job 7's", sock7, mallory, ""},
		{"another local user on job 8's", sock8, mallory, ""},
	} {
		job, err := askJob(t, c.path, c.uid, c.uid)
		switch {
		case c.wantJob == "" && !errors.Is(err, unix.EACCES):
			t.Errorf("%s socket: served by job %q (%v); want the connection refused (EACCES)", c.who, job, err)
		case c.wantJob != "" && (err != nil || job != c.wantJob):
			t.Errorf("%s socket: served by job %q (%v); want job %s", c.who, job, err, c.wantJob)
		}
	}
	stop7()
	if job, err := askJob(t, sock7, -1, -1); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("job 7's socket after its stop: served by job %q (%v); want the connection refused", job, err)
	}
	if job, err := askJob(t, sock8, bob, bob); err != nil || job != "8" {
		t.Errorf("job 8's socket after job 7's stop: served by job %q (%v); want job 8", job, err)
	}
}

// TestJobSocketsConcurrent: jobs' step sockets opened, used and closed
// at once, many at a time, each caller served by its own job; when the
// last is closed and the node stops, the shared acceptor is gone.
func TestJobSocketsConcurrent(t *testing.T) {
	n, h := testNode("n1")
	base := t.TempDir()
	stopNode := n.Run(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				id := 100*(w+1) + i
				dir := filepath.Join(base, fmt.Sprint(id))
				_, stop := sockAlloc(t, n, h, id, os.Getuid(), os.Getgid(), dir)
				job, err := askJob(t, filepath.Join(dir, SocketName), -1, -1)
				if err != nil || job != fmt.Sprint(id) {
					errs <- fmt.Errorf("job %d's socket: served by job %q (%v)", id, job, err)
				}
				stop()
				if _, err := askJob(t, filepath.Join(dir, SocketName), -1, -1); !errors.Is(err, syscall.ECONNREFUSED) {
					errs <- fmt.Errorf("job %d's socket after its stop: %v; want the connection refused", id, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	stopNode()
	sockets.mu.Lock()
	set, refs := sockets.set, sockets.refs
	sockets.mu.Unlock()
	if set != nil || refs != 0 {
		t.Errorf("after the last socket and the node: acceptor %v with %d references; want none", set, refs)
	}
}

// attackBase is a new directory for the attacks' job directories,
// traversable by everyone, as a node's jobs/ (0711); under os.TempDir,
// not t.TempDir, whose parents only root may traverse. It is removed
// when the test ends.
func attackBase(t *testing.T, prefix string) string {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return base
}
