package containerd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// maxSocketPath keeps the gRPC socket (plus containerd's ".ttrpc" sibling)
// under the 108-byte sun_path limit of unix sockets.
const maxSocketPath = 100

// DaemonOptions configure StartDaemon.
type DaemonOptions struct {
	// Dir holds config.toml, root/, state/, containerd.log, containerd.pid
	// and, when the path is short enough, containerd.sock.
	Dir string
	// Log, if set, receives the daemon's log as it is written. The daemon
	// itself always logs to Dir/containerd.log (a file, not a pipe, so it
	// keeps running when this process dies).
	Log io.Writer
	// Binary is the containerd executable; default "containerd" from PATH.
	Binary string
	// ReadyTimeout bounds the wait for the daemon to serve; default 30s.
	ReadyTimeout time.Duration
}

// Daemon is a private containerd started (or found running) by StartDaemon.
type Daemon struct {
	dir, socket, logPath, pidPath string
	// Reused is true when a containerd from an earlier run of the same Dir
	// still answered on the socket and was adopted instead of started.
	Reused bool
	pid    int

	cmd  *exec.Cmd     // nil when reused
	done chan struct{} // closed when cmd has exited; nil when reused

	tailStop, tailDone chan struct{} // nil without Log

	stopOnce sync.Once
	stopErr  error
}

// SocketPath returns where the daemon's socket lives for dir: dir/containerd.sock,
// or, when that is too long for a unix socket, /tmp/gpud-ctd-<hash of dir>/c.sock
// (stable, so a later run of the same dir finds the same daemon).
func SocketPath(dir string) string {
	p := filepath.Join(dir, "containerd.sock")
	if len(p) <= maxSocketPath {
		return p
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(os.TempDir(), "gpud-ctd-"+hex.EncodeToString(sum[:6]), "c.sock")
}

// StartDaemon starts a private containerd with its root, state, socket and
// config under opts.Dir, in its own process group so that it and its shims
// outlive a kill -9 of this process, and waits until it serves. If a
// containerd from an earlier run of the same Dir still answers, it is reused
// (Daemon.Reused).
func StartDaemon(ctx context.Context, opts DaemonOptions) (*Daemon, error) {
	if opts.Dir == "" {
		return nil, errors.New("start containerd: no directory given")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start containerd in %s: %w", opts.Dir, err)
	}
	d := &Daemon{
		dir:     dir,
		socket:  SocketPath(dir),
		logPath: filepath.Join(dir, "containerd.log"),
		pidPath: filepath.Join(dir, "containerd.pid"),
	}
	for _, p := range []string{dir, filepath.Dir(d.socket)} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("start containerd: create %s: %w", p, err)
		}
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}

	if serves(ctx, d.socket) {
		d.Reused = true
		if b, err := os.ReadFile(d.pidPath); err == nil {
			d.pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		d.startTail(opts.Log)
		return d, nil
	}
	// Nothing answers: a socket file left by a dead daemon would make the
	// new one fail to listen.
	for _, p := range []string{d.socket, d.socket + ".ttrpc"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("start containerd: remove stale socket %s: %w", p, err)
		}
	}

	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(daemonConfig(dir, d.socket)), 0o600); err != nil {
		return nil, fmt.Errorf("start containerd: write %s: %w", cfgPath, err)
	}
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start containerd: open log %s: %w", d.logPath, err)
	}
	defer logf.Close() // the child has its own copy
	bin := opts.Binary
	if bin == "" {
		bin = "containerd"
	}
	// Not CommandContext: the daemon must outlive ctx and this process.
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its shims' OCI runtime may then run from the read-only bind the
	// runtime makes instead of copying itself at each run (ocireadonly.go).
	cmd.Env = append(os.Environ(), clonedBinaryEnv+"=1")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd (%s): %w", bin, err)
	}
	d.cmd, d.pid, d.done = cmd, cmd.Process.Pid, make(chan struct{})
	go func() { // owned by d: Stop waits on done
		_ = cmd.Wait()
		close(d.done)
	}()
	if err := os.WriteFile(d.pidPath, []byte(strconv.Itoa(d.pid)+"\n"), 0o600); err != nil {
		d.kill()
		return nil, fmt.Errorf("start containerd: write %s: %w", d.pidPath, err)
	}
	d.startTail(opts.Log)

	if err := d.waitReady(ctx, timeout); err != nil {
		d.kill()
		d.stopTail()
		return nil, fmt.Errorf("start containerd in %s: %w; log: %s", dir, err, d.logTail(2048))
	}
	return d, nil
}

func daemonConfig(dir, socket string) string {
	q := strconv.Quote
	return fmt.Sprintf(`# Written by gpud: a private containerd for gpud jobs.
version = 2
root = %s
state = %s
# gpud talks to containerd directly; CRI would only add Kubernetes' needs.
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %s

[ttrpc]
  address = %s

[plugins."io.containerd.internal.v1.opt"]
  path = %s
`, q(filepath.Join(dir, "root")), q(filepath.Join(dir, "state")), q(socket), q(socket+".ttrpc"), q(filepath.Join(dir, "opt")))
}

// serves reports whether a containerd answers Version on socket.
func serves(ctx context.Context, socket string) bool {
	if _, err := os.Stat(socket); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.New(socket, client.WithTimeout(time.Second))
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Version(ctx)
	return err == nil
}

func (d *Daemon) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if serves(ctx, d.socket) {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("containerd exited before serving (%s)", d.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("containerd did not serve on %s within %s: %w", d.socket, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// Address is the daemon's gRPC socket, for Options.Address.
func (d *Daemon) Address() string { return d.socket }

// Dir is the daemon's directory.
func (d *Daemon) Dir() string { return d.dir }

// LogPath is the daemon's log file.
func (d *Daemon) LogPath() string { return d.logPath }

// Pid is the daemon's process id (0 if a reused daemon left no pid file).
func (d *Daemon) Pid() int { return d.pid }

// Stop sends SIGTERM, waits for the daemon to exit until ctx is done, then
// sends SIGKILL. Shims and their containers keep running: delete them first
// if they should not. Stop is idempotent.
func (d *Daemon) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		defer d.stopTail()
		if d.pid == 0 {
			d.stopErr = fmt.Errorf("stop containerd in %s: pid unknown (no %s)", d.dir, d.pidPath)
			return
		}
		if d.cmd == nil && !isContainerd(d.pid) {
			return // a reused daemon that already went away
		}
		if err := syscall.Kill(d.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			d.stopErr = fmt.Errorf("stop containerd (pid %d): %w", d.pid, err)
			return
		}
		if d.waitExit(ctx) {
			return
		}
		d.kill()
		if !d.waitExit(context.Background()) {
			d.stopErr = fmt.Errorf("stop containerd (pid %d): still running after SIGKILL", d.pid)
		}
	})
	return d.stopErr
}

func (d *Daemon) kill() {
	_ = syscall.Kill(d.pid, syscall.SIGKILL)
}

// waitExit waits for the daemon to exit, or for ctx. A reused daemon is not
// our child, so its exit is polled through /proc.
func (d *Daemon) waitExit(ctx context.Context) bool {
	if d.done != nil {
		select {
		case <-d.done:
			return true
		case <-ctx.Done():
			return false
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for isContainerd(d.pid) {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// isContainerd reports whether pid is a live containerd (and not a zombie or
// a recycled pid).
func isContainerd(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) state ..."
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return strings.Contains(s[:i], "(containerd") && s[i+2] != 'Z'
}

// startTail copies the log file to w as it grows, until Stop.
func (d *Daemon) startTail(w io.Writer) {
	if w == nil {
		return
	}
	f, err := os.Open(d.logPath)
	if err != nil {
		fmt.Fprintf(w, "containerd log %s unreadable: %v\n", d.logPath, err)
		return
	}
	d.tailStop, d.tailDone = make(chan struct{}), make(chan struct{})
	go func() { // owned by d: stopTail waits on tailDone
		defer close(d.tailDone)
		defer f.Close()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = io.Copy(w, f)
			select {
			case <-d.tailStop:
				_, _ = io.Copy(w, f)
				return
			case <-tick.C:
			}
		}
	}()
}

func (d *Daemon) stopTail() {
	if d.tailStop == nil {
		return
	}
	select {
	case <-d.tailStop:
	default:
		close(d.tailStop)
	}
	<-d.tailDone
}

// logTail returns the last n bytes of the log, for error messages.
func (d *Daemon) logTail(n int64) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return strings.TrimSpace(string(b))
}
