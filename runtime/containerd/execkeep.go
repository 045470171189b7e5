package containerd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/cio"
)

// Output that outlives the caller. An exec's output goes through FIFOs
// that the shim writes and the caller (the node agent) reads. When the
// caller dies, the shim still holds them, so what the process writes
// waits there; but once the process ends the shim closes its ends, and a
// FIFO's unread data is freed with its last open end: output written
// just before an exit during the caller's absence would be lost. A keeper
// (a host shell that only sleeps) holds each output FIFO open for
// reading and writing from the start until the caller has read the
// output after the exit, so a caller that attaches again (AttachExec)
// still reads it. The keeper exits by itself once the container's init
// process is gone (the job ended: nothing is left to deliver), so a
// caller that never comes back leaks nothing. Its identity (pid and start
// time, against pid reuse) is written next to the FIFOs, which cio
// removes when the process is deleted.

const keeperFile = "gpud-keeper"

// keeper is a process holding an exec's output FIFOs open.
type keeper struct {
	pid   int
	start string // /proc/PID/stat start time
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd was waited for (own child)
}

// keeperScript sleeps while the container's init process ($1) lives.
// Its sleep does not inherit the FIFOs (fds 3 and 4), so they close the
// moment the keeper is killed.
const keeperScript = `while kill -0 "$1" 2>/dev/null; do sleep 5 3>&- 4>&-; done`

// startKeeper starts a keeper for the output FIFOs of c, for a process in
// the container whose init process is initPID.
func startKeeper(c cio.Config, initPID uint32) (*keeper, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	dir := ""
	for _, p := range []string{c.Stdout, c.Stderr} {
		if p == "" {
			continue
		}
		// O_RDWR opens a FIFO without waiting for the other side. A
		// terminal has no stderr FIFO, though its name is set.
		f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		dir = filepath.Dir(p)
	}
	if dir == "" {
		return nil, nil
	}
	cmd := exec.Command("/bin/sh", "-c", keeperScript, "gpud-exec-keeper", strconv.FormatUint(uint64(initPID), 10))
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	k := &keeper{pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(k.done) }()
	k.start = procStart(k.pid)
	if err := os.WriteFile(filepath.Join(dir, keeperFile), fmt.Appendf(nil, "%d %s\n", k.pid, k.start), 0o600); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

// findKeeper is the keeper of an exec whose output FIFO is fifo, started
// by an earlier caller; nil when there is none (or it is gone).
func findKeeper(fifo string) *keeper {
	if fifo == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(fifo), keeperFile))
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return nil
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 1 || procStart(pid) != f[1] {
		return nil
	}
	return &keeper{pid: pid, start: f[1]}
}

// stop ends the keeper: the FIFOs then end at the shim's close.
func (k *keeper) stop() {
	if k == nil {
		return
	}
	// The keeper leads its own process group (Setsid): its sleep goes too.
	if k.cmd != nil {
		_ = syscall.Kill(-k.pid, syscall.SIGKILL)
		<-k.done
		return
	}
	if procStart(k.pid) == k.start { // still the same process
		_ = syscall.Kill(-k.pid, syscall.SIGKILL)
	}
}

// procStart is a process's start time (field 22 of /proc/PID/stat), ""
// when there is no such process.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // fields from 3 on: state is f[0], starttime (22) is f[19]
}
