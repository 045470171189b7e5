package process

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// RaiseOpenFiles lifts the open-files limit as far as this process may,
// and logs where it ends: `gpud controller` holds one connection per node
// agent (HTTP/2: long poll, heartbeats and events share it) plus users'
// and its databases', and `gpud loadtest` one per simulated agent. The
// soft limit goes to the hard one (Go does that too at start, but says
// nothing); root also tries to lift the hard limit to fs.nr_open, which a
// container without CAP_SYS_RESOURCE refuses (then the hard limit stays,
// and the log says so). It returns the soft limit in effect.
func RaiseOpenFiles(log *slog.Logger, who string) uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("read the open-files limit", "err", err)
		return 0
	}
	before := rl
	hardErr := ""
	if nr := nrOpen(); nr > rl.Max && os.Geteuid() == 0 {
		want := syscall.Rlimit{Cur: nr, Max: nr}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			rl = want
		} else {
			hardErr = err.Error()
		}
	}
	if rl.Cur < rl.Max {
		want := syscall.Rlimit{Cur: rl.Max, Max: rl.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			log.Warn("raise the open-files limit to the hard limit", "soft", rl.Cur, "hard", rl.Max, "err", err)
		} else {
			rl = want
		}
	}
	attrs := []any{"who", who, "soft", rl.Cur, "hard", rl.Max, "was_soft", before.Cur, "was_hard", before.Max}
	if hardErr != "" {
		attrs = append(attrs, "hard_not_raised", hardErr)
	}
	// One descriptor per node agent (HTTP/2), a few per user, ~20 for
	// databases and logs: under 8,192 a cluster of a few thousand nodes
	// meets the limit before the [api] caps.
	if rl.Cur < 8192 {
		log.Warn("the open-file limit is low; raise it (LimitNOFILE= in the systemd unit) to at least the node count plus a few thousand", attrs...)
	} else {
		log.Info("open-file limit raised to the hard limit", attrs...)
	}
	return rl.Cur
}

// nrOpen is fs.nr_open, the most any process may hold (0 if unknown).
func nrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
