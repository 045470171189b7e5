package step

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// The step sockets of ended jobs, kept for the next job of the same user.
//
// A job's step socket costs socket, fchmod, bind, listen, the chown and
// the epoll add at its start, and at its end a close (the listening
// socket's release and its removal from the epoll set: the dearest of a
// job's system calls in the live agents) and the unlink of its file. A
// listening unix socket is reached through the file it was bound to,
// wherever that file is renamed, so the node keeps the socket of an
// ended job listening in a directory only root reaches (Config.SocketPool,
// 0700) and moves it into the next job directory of the same user: one
// rename in, one rename out, the mode set again (the user owns the file
// and may have changed it).
//
// Only the same user's (uid and gid) next job gets it: the file is that
// user's, who may have linked it elsewhere (the owner of a file may
// hard-link it) or connected just as the job ended, so whatever reaches
// the socket after its job could reach it before, and another user's job
// never gets a socket a user held. While it waits in the pool it is
// nobody's: callers that reach it (through such a link, or queued as its
// job ended) are closed by the acceptor.

// maxPooledSockets bounds a node's idle sockets (a listening unix socket
// and its file: a few KiB of kernel memory each).
const maxPooledSockets = 16

// socketPool is a node's idle job sockets, by their users.
type socketPool struct {
	dir    string // "": no pool (each job's socket is made and closed)
	mu     sync.Mutex
	idle   []*heldSocket
	next   uint64
	closed bool // not open (before Run, after its stop, or no directory)
}

// open makes the pool's directory afresh (what an earlier agent left
// there are dead sockets' files) and takes sockets until close. On
// failure the node has no pool.
func (p *socketPool) open() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir == "" {
		return nil
	}
	err := os.RemoveAll(p.dir)
	if err == nil {
		err = os.Mkdir(p.dir, 0o700)
	}
	if err == nil {
		// 0700 whatever the umask: only root reaches the sockets there.
		err = os.Chmod(p.dir, 0o700)
	}
	p.closed = err != nil
	return err
}

// take returns an idle socket of uid:gid's, the newest, or nil.
func (p *socketPool) take(uid, gid int) *heldSocket {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if h := p.idle[i]; h.uid == uid && h.gid == gid {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return h
		}
	}
	return nil
}

// slot returns a fresh name in the pool's directory for a socket to
// wait under, or "" when the pool takes no more.
func (p *socketPool) slot() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir == "" || p.closed || len(p.idle) >= maxPooledSockets {
		return ""
	}
	p.next++
	return filepath.Join(p.dir, strconv.FormatUint(p.next, 10))
}

// put adds h, now at its slot, to the idle sockets; false when the pool
// closed or filled meanwhile (the caller discards h).
func (p *socketPool) put(h *heldSocket) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= maxPooledSockets {
		return false
	}
	p.idle = append(p.idle, h)
	return true
}

// close discards every idle socket; sockets in use are closed, not
// pooled, when their jobs end.
func (p *socketPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, h := range idle {
		h.discard()
	}
}

// discard closes a pooled socket, removes its file and gives back its
// reference.
func (h *heldSocket) discard() {
	h.close()
	if h.pooled != "" {
		_ = unix.Unlink(h.pooled)
		h.pooled = ""
	}
	releaseSockets()
}

// openSocket returns al's listening step socket at path (in its job
// directory, root's), the job user's (uid:gid), mode 0600: an idle one
// of the same user's from the pool, moved there, or a new one. It holds
// one reference to the acceptor.
func (n *Node) openSocket(ctx context.Context, al *Alloc, path string, uid, gid int) (*heldSocket, error) {
	if h := n.pool.take(uid, gid); h != nil {
		if err := h.reuse(ctx, al, path); err == nil {
			return h, nil
		} else {
			al.logger().Warn("reuse a pooled step socket; making a new one", "err", err)
		}
		h.discard()
	}
	set, err := acquireSockets()
	if err != nil {
		return nil, err
	}
	h, err := set.listen(ctx, al, path, uid, gid)
	if err != nil {
		releaseSockets()
		return nil, err
	}
	return h, nil
}

// reuse moves pooled socket h to path as al's. It is al's before its
// file is there, so its first caller is al's; its mode is 0600 again
// before anyone but root can reach it (the pool's directory is root's,
// 0700). A file at path (a socket an earlier agent left: a re-adopted
// job) is replaced.
func (h *heldSocket) reuse(ctx context.Context, al *Alloc, path string) error {
	h.serve(ctx, al)
	if err := unix.Fchmodat(unix.AT_FDCWD, h.pooled, 0o600, 0); err != nil {
		return &os.PathError{Op: "chmod", Path: h.pooled, Err: err}
	}
	if err := unix.Renameat(unix.AT_FDCWD, h.pooled, unix.AT_FDCWD, path); err != nil {
		return &os.LinkError{Op: "rename", Old: h.pooled, New: path, Err: err}
	}
	h.pooled = ""
	return nil
}

// closeSocket ends h's service of its job: with recycle (the job ended
// and its container is gone), h's file is moved from path to the pool
// and h waits there for its user's next job; otherwise, or when the pool
// takes no more, h is closed (its file stays at path). It reports
// whether the file left path.
func (n *Node) closeSocket(h *heldSocket, path string, recycle bool) (moved bool) {
	if recycle {
		if slot := n.pool.slot(); slot != "" {
			err := unix.Renameat(unix.AT_FDCWD, path, unix.AT_FDCWD, slot)
			if err == nil {
				h.serve(nil, nil)
				h.pooled = slot
				if !n.pool.put(h) {
					h.discard()
				}
				return true
			}
			n.cfg.Log.Debug("move an ended job's step socket to the pool; closing it", "path", path, "err", fmt.Errorf("rename: %w", err))
		}
	}
	h.close()
	releaseSockets()
	return false
}
