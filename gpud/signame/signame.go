// Package signame reads and writes Linux signal names: it parses what a
// user types for a signal ("USR1", "SIGUSR1", "usr1", "10") and formats
// the canonical names the daemons store and print. The names are the
// kernel's, from golang.org/x/sys/unix. It is a leaf (standard library and
// x/sys) that the CLIs, the controller, the node agent and checkpoint share;
// which signals a caller allows (checkpoint refuses KILL and STOP) stays
// with the caller.
package signame

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Max is the highest Linux signal number (SIGRTMAX).
const Max = 64

var (
	// ErrUnknown: the text is neither a signal name nor a number.
	ErrUnknown = errors.New("unknown signal")
	// ErrRange: the text is a number, but not one from 1 to Max.
	ErrRange = errors.New("signal number out of range")
)

// Parse accepts a signal's name, with or without SIG and in any case of
// ASCII letters ("USR1", "SIGUSR1", "usr1"), or its number from 1 to Max in
// ASCII digits ("10"). Nothing else is trimmed or accepted: no spaces, no
// sign. Its errors wrap ErrUnknown or ErrRange.
func Parse(s string) (syscall.Signal, error) {
	if digits(s) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > Max {
			return 0, fmt.Errorf("%w: %s is not from 1 to %d", ErrRange, s, Max)
		}
		return syscall.Signal(n), nil
	}
	if !alnum(s) {
		return 0, fmt.Errorf("%w %q: use a name like USR1 or SIGUSR1, or a number from 1 to %d", ErrUnknown, s, Max)
	}
	// strings.ToUpper on ASCII only: Unicode case mapping would take
	// "ſigusr1" (long s) for SIGUSR1.
	u := strings.ToUpper(s)
	if sig := unix.SignalNum("SIG" + strings.TrimPrefix(u, "SIG")); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%w %q: use a name like USR1 or SIGUSR1, or a number from 1 to %d", ErrUnknown, s, Max)
}

// Name is the canonical name of sig without SIG ("USR1"), as jobs store
// and the node agent takes it; a signal the kernel has no name for (the
// real-time ones, 32 to 64) is its number ("34").
func Name(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}

// Full is the kernel's name of sig ("SIGUSR1"), for messages and logs; a
// signal without a name is its number ("34").
func Full(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return strconv.Itoa(int(sig))
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// alnum reports whether s is one or more ASCII letters or digits (names
// like USR1 end in one).
func alnum(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20 // lower case for letters
		if !('a' <= c && c <= 'z') && !('0' <= s[i] && s[i] <= '9') {
			return false
		}
	}
	return true
}
