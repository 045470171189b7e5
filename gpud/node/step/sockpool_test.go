package step

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// asThread runs fn on a thread of its own with uid:gid's credentials
// (the kernel keeps them per thread; the thread dies with the goroutine).
func asThread(uid, gid int, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			ch <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			ch <- fmt.Errorf("setresuid: %w", e)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

func inode(t *testing.T, path string) (ino uint64, mode uint32, uid int) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return st.Ino, st.Mode, int(st.Uid)
}

// TestPooledSocketsAttacked: an ended job's step socket waits in the
// node's pool (root's, 0700) for its user's next job, and nobody gains
// by it. The job's user, who owns the socket's file, links it into a
// directory of theirs and opens its mode to everyone while the job runs;
// after the job's end the socket is gone from the job directory, and a
// caller through the link (another local user) is closed unserved; the
// next job of another user gets a socket of its own (never one a user
// held); the user's next job gets the pooled one, mode 0600 again, so the
// other user is refused through the link and the user is served by the
// new job. When the node stops, the pool is emptied and the acceptor
// gone. Root only (the users are made up: 61001-61003).
func TestPooledSocketsAttacked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the sockets are given to the jobs' users")
	}
	const alice, bob, mallory = 61001, 61002, 61003
	base := attackBase(t, "sockpool-")
	// alice's own directory, which others may traverse.
	mine := filepath.Join(base, "alice")
	if err := os.Mkdir(mine, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, alice, alice); err != nil {
		t.Fatal(err)
	}
	n, h := testNode("n1")
	n.cfg.SocketPool = filepath.Join(base, "pool")
	n.pool.dir = n.cfg.SocketPool
	stopNode := n.Run(context.Background())
	defer stopNode()
	if _, mode, uid := inode(t, n.cfg.SocketPool); mode&0o7777 != 0o700 || uid != 0 {
		t.Fatalf("pool directory mode %o uid %d; want root's 0700", mode&0o7777, uid)
	}

	dir7 := filepath.Join(base, "j7")
	al7, stop7 := sockAlloc(t, n, h, 7, alice, alice, dir7)
	defer stop7()
	sock7, link := filepath.Join(dir7, SocketName), filepath.Join(mine, "kept.sock")
	if err := asThread(alice, alice, func() error {
		if err := unix.Link(sock7, link); err != nil {
			return fmt.Errorf("link: %w", err)
		}
		return unix.Chmod(link, 0o666)
	}); err != nil {
		t.Fatalf("as job 7's user, link its socket and open its mode: %v", err)
	}
	if job, err := askJob(t, link, mallory, mallory); err != nil || job != "7" {
		t.Fatalf("another user through the link while job 7 runs: job %q (%v); want job 7 (the user opened it)", job, err)
	}
	ino7, _, _ := inode(t, link)
	if !al7.EndServe() {
		t.Fatal("job 7's socket did not go to the pool")
	}
	if _, err := os.Lstat(sock7); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("job 7's socket file after its end: %v; want it gone from the job directory", err)
	}
	if job, err := askJob(t, link, mallory, mallory); err == nil {
		t.Errorf("another user through the link while the socket is pooled: served by job %q; want the connection closed", job)
	}

	dir8 := filepath.Join(base, "j8")
	_, stop8 := sockAlloc(t, n, h, 8, bob, bob, dir8)
	defer stop8()
	sock8 := filepath.Join(dir8, SocketName)
	if ino8, mode, uid := inode(t, sock8); ino8 == ino7 || mode&0o7777 != 0o600 || uid != bob {
		t.Errorf("job 8's socket: inode %d (pooled %d) mode %o uid %d; want a socket of its own, bob's, 0600", ino8, ino7, mode&0o7777, uid)
	}
	if job, err := askJob(t, link, mallory, mallory); err == nil {
		t.Errorf("another user through the link after another user's job started: served by job %q; want the connection closed", job)
	}

	dir9 := filepath.Join(base, "j9")
	_, stop9 := sockAlloc(t, n, h, 9, alice, alice, dir9)
	defer stop9()
	sock9 := filepath.Join(dir9, SocketName)
	if ino9, mode, uid := inode(t, sock9); ino9 != ino7 || mode&0o7777 != 0o600 || uid != alice {
		t.Errorf("job 9's socket: inode %d (pooled %d) mode %o uid %d; want the pooled one, alice's, 0600 again", ino9, ino7, mode&0o7777, uid)
	}
	for _, c := range []struct {
		who     string
		path    string
		uid     int
		wantJob string
	}{
		{"job 9's user on its socket", sock9, alice, "9"},
		{"job 9's user through the link", link, alice, "9"},
		{"root on job 9's socket", sock9, -1, "9"},
		{"another user through the link", link, mallory, ""},
		{"job 8's user on job 9's socket", sock9, bob, ""},
	} {
		uid := c.uid
		job, err := askJob(t, c.path, uid, uid)
		switch {
		case c.wantJob == "" && !errors.Is(err, unix.EACCES):
			t.Errorf("%s: served by job %q (%v); want the connection refused (EACCES)", c.who, job, err)
		case c.wantJob != "" && (err != nil || job != c.wantJob):
			t.Errorf("%s: served by job %q (%v); want job %s", c.who, job, err, c.wantJob)
		}
	}

	stop8() // not recycled: closed, its file left for the job directory's removal
	if _, err := askJob(t, sock8, -1, -1); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("job 8's socket after a stop that is not its job's end: %v; want the connection refused", err)
	}
	stop9()
	stopNode()
	if ents, err := os.ReadDir(n.cfg.SocketPool); err != nil || len(ents) != 0 {
		t.Errorf("pool after the node stopped: %v (%v); want it empty", ents, err)
	}
	sockets.mu.Lock()
	set, refs := sockets.set, sockets.refs
	sockets.mu.Unlock()
	if set != nil || refs != 0 {
		t.Errorf("after the node stopped: acceptor %v with %d references; want none", set, refs)
	}
}

// TestSocketPoolBounded: a node keeps at most maxPooledSockets idle
// sockets; the ends beyond that close theirs (the file stays for the job
// directory's removal), and jobs of the same user reuse the pooled ones
// as they start, each serving only its own job.
func TestSocketPoolBounded(t *testing.T) {
	n, h := testNode("n1")
	base := t.TempDir()
	n.cfg.SocketPool = filepath.Join(base, "pool")
	n.pool.dir = n.cfg.SocketPool
	stopNode := n.Run(context.Background())
	defer stopNode()
	uid, gid := os.Getuid(), os.Getgid()
	var als []*Alloc
	for i := range maxPooledSockets + 3 {
		al, _ := sockAlloc(t, n, h, 100+i, uid, gid, filepath.Join(base, fmt.Sprint(100+i)))
		als = append(als, al)
	}
	for i, al := range als {
		moved := al.EndServe()
		if want := i < maxPooledSockets; moved != want {
			t.Errorf("end %d: moved to the pool %v; want %v", i, moved, want)
		}
	}
	if ents, _ := os.ReadDir(n.cfg.SocketPool); len(ents) != maxPooledSockets {
		t.Errorf("pool holds %d sockets; want %d", len(ents), maxPooledSockets)
	}
	for i := range 3 {
		id := 200 + i
		dir := filepath.Join(base, fmt.Sprint(id))
		_, stop := sockAlloc(t, n, h, id, uid, gid, dir)
		if job, err := askJob(t, filepath.Join(dir, SocketName), -1, -1); err != nil || job != fmt.Sprint(id) {
			t.Errorf("job %d on a pooled socket: served by job %q (%v)", id, job, err)
		}
		stop()
	}
	if ents, _ := os.ReadDir(n.cfg.SocketPool); len(ents) != maxPooledSockets-3 {
		t.Errorf("pool holds %d sockets after 3 starts; want %d", len(ents), maxPooledSockets-3)
	}
}

// BenchmarkJobSocket is one job's step socket, served from its job's
// start to its end (the job directory made and removed around it, as the
// runner does): made and closed each time (fresh), or from and back to
// the node's pool (pooled). cpu-ns/op is the process's CPU time.
func BenchmarkJobSocket(b *testing.B) {
	for _, pooled := range []bool{false, true} {
		b.Run(map[bool]string{false: "fresh", true: "pooled"}[pooled], func(b *testing.B) {
			base, err := os.MkdirTemp("/dev/shm", "jobsock-")
			if err != nil {
				b.Skip("no /dev/shm:", err)
			}
			b.Cleanup(func() { os.RemoveAll(base) })
			n, h := testNode("n1")
			if pooled {
				n.cfg.SocketPool = filepath.Join(base, "pool")
				n.pool.dir = n.cfg.SocketPool
			}
			stopNode := n.Run(context.Background())
			defer stopNode()
			uid, gid := os.Getuid(), os.Getgid()
			if uid == 0 {
				uid, gid = 65534, 65534
			}
			var ru0, ru1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
			id := 0
			for b.Loop() {
				id++
				dir := filepath.Join(base, fmt.Sprint(id))
				if err := os.Mkdir(dir, 0o711); err != nil {
					b.Fatal(err)
				}
				asg := &api.Assignment{Job: spec.Job{ID: spec.JobID(id), UID: uint32(uid), GID: uint32(gid)},
					Alloc: spec.Alloc{ID: fmt.Sprint(id), Nodes: []spec.NodeAlloc{{Node: "n1"}}}}
				al := n.NewAlloc(asg.Alloc.ID, asg.Job.ID)
				al.Ready(asg, asg.Alloc.Nodes[0], "c1", dir, nil, n.cfg.Log)
				h.add(asg.Alloc.ID, al)
				stop := al.Serve(context.Background(), nil)
				if !al.EndServe() {
					_ = unix.Unlink(filepath.Join(dir, SocketName))
				}
				stop()
				if err := unix.Rmdir(dir); err != nil {
					b.Fatal(err)
				}
			}
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
			cpu := (ru1.Utime.Nano() + ru1.Stime.Nano()) - (ru0.Utime.Nano() + ru0.Stime.Nano())
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
