package srun

import (
	"bytes"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/api"
)

// srun --pty: task 0 runs on a terminal in the allocation container, and
// srun's own terminal is put in raw mode for as long as it runs, so every
// key (^C, ^Z, ^D among them) goes to the task's terminal as a byte and
// that terminal's line discipline acts on it, as under Slurm's --pty: ^C
// interrupts the shell's foreground command and the shell carries on.
// srun sends its window size at the start and on every SIGWINCH.
//
// The terminal calls are golang.org/x/sys/unix's termios ioctls, which
// the module already requires, rather than golang.org/x/term (which wraps
// the same calls) as a new dependency.

// terminal is srun's terminal in raw mode.
type terminal struct {
	fd    int
	saved *unix.Termios
}

// isTerminal says whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// makeRaw puts f's terminal in raw mode (as cfmakeraw(3)); restore puts
// it back.
func makeRaw(f *os.File) (*terminal, error) {
	fd := int(f.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return &terminal{fd: fd, saved: saved}, nil
}

// restore puts the terminal back as it was; safe to call more than once.
func (t *terminal) restore() {
	if t != nil {
		_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, t.saved)
	}
}

// termSize is f's terminal size (0, 0 when unknown).
func termSize(f *os.File) (rows, cols int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Row), int(ws.Col)
}

// forwardResize sends the terminal's size on every SIGWINCH until done.
func forwardResize(f *os.File, send func(any) error, done <-chan struct{}) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(c)
		for {
			select {
			case <-done:
				return
			case <-c:
				if rows, cols := termSize(f); rows > 0 && cols > 0 {
					_ = send(api.StepMsg{Kind: api.StepResize, Rows: rows, Cols: cols})
				}
			}
		}
	}()
}

// crlf writes srun's own messages on a raw terminal, where "\n" no
// longer returns the carriage.
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// setupPty asks for task 0 on a terminal of in's size and puts in in raw
// mode; restore undoes it. When in is not a terminal the step runs
// without one (as Slurm's srun does), with a warning.
func setupPty(o *options, in *os.File, stderr io.Writer) (restore func(), err error) {
	if !isTerminal(in) {
		_, _ = io.WriteString(stderr, "srun: warning: --pty: stdin is not a terminal; task 0 runs without one\n")
		return func() {}, nil
	}
	o.req.Pty, o.req.Stdin = true, true
	o.req.Rows, o.req.Cols = termSize(in)
	t, err := makeRaw(in)
	if err != nil {
		return nil, err
	}
	return t.restore, nil
}
