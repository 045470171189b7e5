package step

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/runtime/safefs"
)

// The jobs' step sockets and the one acceptor that serves them all.
//
// Each job keeps its own listening socket in its job directory (owned by
// the job's user, mode 0600: the kernel lets only that user, or root,
// connect, and only a process that can reach the job's directory, as
// before). What is shared is the accepting: the process holds one epoll
// set of every job's listening socket, itself watched by Go's netpoller,
// and one goroutine accepts on whichever socket has a caller and hands
// the connection to that socket's job. A job's start then costs no
// goroutine, no net package listener (its SO_REUSEADDR, getsockname, the
// first accept that finds nobody, the poller's removal at close) and no
// wake-up at its end: socket, fchmod, bind, listen, the epoll add, the
// chown; at the end one close (which also leaves the epoll set).

// jobSocket is one job's listening step socket in the shared acceptor.
type jobSocket struct {
	fd  int // guarded by sockets.mu; -1 once closed
	al  *Alloc
	ctx context.Context
}

// socketSet is the process's acceptor: its epoll set and the job sockets
// in it, by the token each was added with.
type socketSet struct {
	mu   sync.Mutex
	ep   *os.File // the epoll set, nonblocking, in Go's netpoller
	epfd int      // ep's descriptor (ep.Fd would make it blocking)
	raw  interface {
		Read(func(uintptr) bool) error
	}
	socks map[uint64]*jobSocket
	next  uint64
	done  chan struct{} // closed when the accept loop has returned
}

// sockets is the process's shared acceptor: made while anything holds a
// reference (each running Node, each open job socket), gone with the
// last (so a test's goroutines all end).
var sockets struct {
	mu   sync.Mutex
	set  *socketSet
	refs int
}

// acquireSockets returns the shared acceptor, starting it if needed,
// with one more reference that the caller gives back with releaseSockets.
func acquireSockets() (*socketSet, error) {
	sockets.mu.Lock()
	defer sockets.mu.Unlock()
	if sockets.set == nil {
		s, err := newSocketSet()
		if err != nil {
			return nil, err
		}
		sockets.set = s
	}
	sockets.refs++
	return sockets.set, nil
}

// releaseSockets gives back a reference; the last one stops the accept
// loop and waits for it to return.
func releaseSockets() {
	sockets.mu.Lock()
	sockets.refs--
	var last *socketSet
	if sockets.refs == 0 {
		last, sockets.set = sockets.set, nil
	}
	sockets.mu.Unlock()
	if last != nil {
		last.ep.Close() // the loop's Read returns
		<-last.done
	}
}

func newSocketSet() (*socketSet, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("make the step sockets' epoll set: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make the step sockets' epoll set nonblocking: %w", err)
	}
	ep := os.NewFile(uintptr(fd), "step-sockets-epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("poll the step sockets' epoll set: %w", err)
	}
	s := &socketSet{ep: ep, epfd: fd, raw: rc, socks: map[uint64]*jobSocket{}, done: make(chan struct{})}
	go s.loop()
	return s, nil
}

// loop accepts on the job sockets the epoll set reports ready until the
// set is closed. Each socket is in the set edge-triggered: a report is
// followed by accepts until the socket has no caller left.
func (s *socketSet) loop() {
	defer close(s.done)
	evs := make([]unix.EpollEvent, 64)
	for {
		err := s.raw.Read(func(fd uintptr) bool {
			for {
				n, err := unix.EpollWait(int(fd), evs, 0)
				if err == unix.EINTR {
					continue
				}
				if n <= 0 {
					return false // nothing ready: wait for the set to be
				}
				for _, ev := range evs[:n] {
					s.accept(uint64(ev.Fd)<<32 | uint64(uint32(ev.Pad)))
				}
			}
		})
		if err != nil {
			return // closed: the last reference went
		}
	}
}

// accept takes every caller waiting on the socket of token tok and
// serves each in its job. It holds s.mu while it accepts, so a socket
// closed meanwhile (its descriptor perhaps reused) is never accepted on:
// a token not in the set (closed since) is skipped. A socket that waits
// in its node's pool (no job: socketPool) has its callers closed.
func (s *socketSet) accept(tok uint64) {
	s.mu.Lock()
	js := s.socks[tok]
	if js == nil || js.fd < 0 {
		s.mu.Unlock()
		return
	}
	al, ctx := js.al, js.ctx
	var conns []int
	var aerr error
	for {
		cfd, _, err := unix.Accept4(js.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != nil {
			if err != unix.EAGAIN {
				aerr = err
			}
			break
		}
		if al == nil {
			unix.Close(cfd) // pooled: nobody's step
			continue
		}
		conns = append(conns, cfd)
	}
	s.mu.Unlock()
	if aerr != nil && al != nil {
		al.logger().Warn("accept on the job's step socket", "err", aerr)
	}
	for _, cfd := range conns {
		f := os.NewFile(uintptr(cfd), "step-conn")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			al.logger().Warn("take a connection on the job's step socket", "err", err)
			continue
		}
		go al.serveConn(ctx, c)
	}
}

// listen makes the listening socket at path, the job user's (uid:gid,
// when this process is root) with mode 0600, and adds it to the set; its
// connections are al's steps, served with ctx. Its close takes it out.
func (s *socketSet) listen(ctx context.Context, al *Alloc, path string, uid, gid int) (*heldSocket, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	// The mode the socket file is made with (less the umask) is the
	// socket's own: 0600 from the start, so nobody else can connect
	// between its bind and its chown.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("fchmod", err)
	}
	sa := &unix.SockaddrUnix{Name: path}
	err = unix.Bind(fd, sa)
	if err == unix.EADDRINUSE {
		// A socket an earlier agent left (a re-adopted job): a fresh
		// job directory has none, so it costs no unlink per start.
		_ = unix.Unlink(path)
		err = unix.Bind(fd, sa)
	}
	if err == nil {
		err = unix.Listen(fd, listenBacklog)
	}
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "listen", Path: path, Err: err}
	}
	// The job directory is root's (0711) and only root writes it, so the
	// path cannot have been swapped; not followed all the same.
	if euid == 0 && uid >= 0 {
		if err := unix.Fchownat(unix.AT_FDCWD, path, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "chown", Path: path, Err: err}
		}
	}
	// A umask that took the owner's bits too (never so for a daemon,
	// but not assumed): the socket file's mode set by its path.
	if safefs.Umask()&0o600 != 0 {
		if err := unix.Fchmodat(unix.AT_FDCWD, path, 0o600, 0); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	js := &jobSocket{fd: fd, al: al, ctx: ctx}
	s.mu.Lock()
	s.next++
	tok := s.next
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(tok >> 32), Pad: int32(uint32(tok))}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		s.mu.Unlock()
		unix.Close(fd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	s.socks[tok] = js
	s.mu.Unlock()
	return &heldSocket{s: s, js: js, tok: tok, uid: uid, gid: gid}, nil
}

// heldSocket is a listening job socket in the acceptor, with one of its
// references: serving a job, or waiting in a node's pool for the next
// job of the same user (socketPool).
type heldSocket struct {
	s        *socketSet
	js       *jobSocket
	tok      uint64
	uid, gid int    // its file's owner
	pooled   string // its path in the pool while it waits there
}

// close takes the socket out of the set. Closing leaves the epoll set
// (nothing else holds the socket); the socket file stays where it is
// (the runner removes it with the job directory). It does not give back
// the reference.
func (h *heldSocket) close() {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.js.fd < 0 {
		return
	}
	unix.Close(h.js.fd)
	h.js.fd = -1
	delete(s.socks, h.tok)
}

// serve makes the socket al's (its callers served with ctx), or nobody's
// (al nil: the callers the acceptor finds then are closed, accept).
//
// Going to nobody, the callers already waiting are not drained here (an
// accept4 per job's end: ~0.1 of the live agents' 13 CPU-s): the
// acceptor has their readiness to handle and closes them if it handles
// it while the socket is nobody's. One it handles after the socket went
// to its user's next job is served there: it came through a path or a
// link only that user (or root) could connect on, to a job of that same
// user, which it could reach anyway (sockpool.go).
func (h *heldSocket) serve(ctx context.Context, al *Alloc) {
	s := h.s
	s.mu.Lock()
	h.js.al, h.js.ctx = al, ctx
	s.mu.Unlock()
}

// listenBacklog is a job socket's backlog (the kernel caps it at
// net.core.somaxconn), as the net package's.
const listenBacklog = 4096
