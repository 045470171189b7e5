package checkpoint

import (
	"errors"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
)

// ExitCodeCheckpointed is the exit code a job uses to say "I wrote a complete
// checkpoint into $GPUD_CHECKPOINT_DIR and stopped". The agent then calls
// MarkReady and Seal, as if the job had touched .done, so the job can be
// requeued from that checkpoint instead of being recorded as failed.
//
// 85 because nothing else gives it a meaning, so a job cannot exit with it by
// accident: it is clear of the codes programs use for their own errors (1, 2),
// of sysexits.h (64–78), of timeout(1) and the shell (124–127) and of deaths
// by signal (128+n, which the shell reports for a killed child).
const ExitCodeCheckpointed = 85

// DefaultSignal is the checkpoint signal when the job gives no --signal.
const DefaultSignal = syscall.SIGUSR1

// DefaultSignalSeconds is how long before its time limit a job is signalled
// when --signal gives no @SECONDS, as in Slurm.
const DefaultSignalSeconds = 60

// maxSignalSeconds is Slurm's limit for @SECONDS.
const maxSignalSeconds = 65535

// signalForm is quoted in every ParseSignal error.
const signalForm = "want [B:]SIG[@SECONDS], e.g. USR1, SIGTERM@120 or B:10@300"

// ParseSignal parses Slurm's --signal=[B:]SIG[@SECONDS]: the signal by name
// (USR1 or SIGUSR1, any case) or number, sent SECONDS (default 60) before
// the job's time limit, to the batch shell only when B: is given. KILL and
// STOP are refused because a job cannot catch them, so it could never
// checkpoint on them. Errors are spec.ErrInvalid and quote the allowed form.
func ParseSignal(s string) (sig syscall.Signal, secondsBefore int, batchOnly bool, err error) {
	bad := func(format string, args ...any) (syscall.Signal, int, bool, error) {
		return 0, 0, false, spec.Errorf(spec.ErrInvalid, "parse --signal %q: "+format+"; "+signalForm, append([]any{s}, args...)...)
	}
	rest := s
	if opt, after, ok := strings.Cut(rest, ":"); ok {
		switch strings.ToUpper(opt) {
		case "B":
			batchOnly = true
		case "R", "RB", "BR":
			return bad("option R (signal at reservation end) is not supported by gpud")
		default:
			return bad("unknown option %q before ':'", opt)
		}
		rest = after
	}
	name, secs, hasSecs := strings.Cut(rest, "@")
	secondsBefore = DefaultSignalSeconds
	if hasSecs {
		n, ok := parseDigits(secs)
		if !ok || n > maxSignalSeconds {
			return bad("seconds %q must be a whole number from 0 to %d", secs, maxSignalSeconds)
		}
		secondsBefore = n
	}
	if name == "" {
		return bad("no signal given")
	}
	// Names are the kernel's, with or without SIG, in any case; numbers
	// run from 1 to SIGRTMAX (gpud/signame).
	sig, err = signame.Parse(name)
	if errors.Is(err, signame.ErrRange) {
		return bad("signal number %s is out of range 1-%d", name, signame.Max)
	} else if err != nil {
		return bad("unknown signal %q", name)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
		return bad("%s cannot be caught, so a job cannot checkpoint on it; use USR1 (the default), USR2 or TERM", signame.Full(sig))
	}
	return sig, secondsBefore, batchOnly, nil
}

// parseDigits accepts only ASCII digits: strconv.Atoi would also take a sign.
func parseDigits(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}
