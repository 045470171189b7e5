package signame

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    syscall.Signal
		wantErr error
	}{
		{in: "USR1", want: syscall.SIGUSR1},
		{in: "SIGUSR1", want: syscall.SIGUSR1},
		{in: "usr1", want: syscall.SIGUSR1},
		{in: "sigUsr1", want: syscall.SIGUSR1},
		{in: "10", want: syscall.SIGUSR1},
		{in: "TERM", want: syscall.SIGTERM},
		{in: "15", want: syscall.SIGTERM},
		{in: "KILL", want: syscall.SIGKILL}, // callers refuse it where it makes no sense
		{in: "1", want: syscall.SIGHUP},
		{in: "34", want: syscall.Signal(34)},
		{in: "64", want: syscall.Signal(64)},
		{in: "010", want: syscall.SIGUSR1},
		{in: "0", wantErr: ErrRange},
		{in: "65", wantErr: ErrRange},
		{in: "99999999999999999999", wantErr: ErrRange},
		{in: "", wantErr: ErrUnknown},
		{in: "SIG", wantErr: ErrUnknown},
		{in: "FOO", wantErr: ErrUnknown},
		{in: "SIGSIGUSR1", wantErr: ErrUnknown},
		{in: " USR1", wantErr: ErrUnknown},
		{in: "USR1 ", wantErr: ErrUnknown},
		{in: "+10", wantErr: ErrUnknown},
		{in: "-1", wantErr: ErrUnknown},
		{in: "SIG10", wantErr: ErrUnknown},
		{in: "ſigusr1", wantErr: ErrUnknown}, // long s: ToUpper would make it SIGUSR1
		{in: "RTMIN", wantErr: ErrUnknown},   // not a kernel name in x/sys; use 34
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Parse(%q) = %v, %v; want an error wrapping %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sig        syscall.Signal
		name, full string
	}{
		{syscall.SIGUSR1, "USR1", "SIGUSR1"},
		{syscall.SIGTERM, "TERM", "SIGTERM"},
		{syscall.SIGKILL, "KILL", "SIGKILL"},
		{syscall.SIGABRT, "ABRT", "SIGABRT"},
		{syscall.Signal(34), "34", "34"},
		{syscall.Signal(64), "64", "64"},
	}
	for _, tc := range tests {
		if got := Name(tc.sig); got != tc.name {
			t.Errorf("Name(%d) = %q, want %q", int(tc.sig), got, tc.name)
		}
		if got := Full(tc.sig); got != tc.full {
			t.Errorf("Full(%d) = %q, want %q", int(tc.sig), got, tc.full)
		}
	}
	// Every signal reads back from both of its names, and the kernel names
	// every standard signal (1-31) on Linux.
	for n := 1; n <= Max; n++ {
		sig := syscall.Signal(n)
		for _, s := range []string{Name(sig), Full(sig), strconv.Itoa(n)} {
			if got, err := Parse(s); err != nil || got != sig {
				t.Errorf("Parse(%q) = %v, %v; want %d", s, got, err, n)
			}
		}
		if named := Name(sig) != strconv.Itoa(n); named != (n < 32) {
			t.Errorf("signal %d: Name = %q; want a name exactly for 1-31", n, Name(sig))
		}
	}
}

// FuzzRoundTrip: whatever Parse accepts is a signal from 1 to Max that reads
// back from its canonical names, and those names are fixed points; the
// input named that signal (its number, or its name with or without SIG in
// any case); whatever Parse refuses wraps ErrUnknown or ErrRange.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"USR1", "SIGUSR1", "usr1", "10", "34", "0", "65", "SIG", "ſigusr1", "", "+10", "sigrtmin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrUnknown) && !errors.Is(err, ErrRange) {
				t.Fatalf("Parse(%q) error %v wraps neither ErrUnknown nor ErrRange", s, err)
			}
			return
		}
		if sig < 1 || sig > Max {
			t.Fatalf("Parse(%q) = %d, out of 1-%d", s, int(sig), Max)
		}
		name, full := Name(sig), Full(sig)
		for _, c := range []string{name, full, strings.ToLower(name), strconv.Itoa(int(sig))} {
			if again, err := Parse(c); err != nil || again != sig {
				t.Fatalf("Parse(%q) = %d but Parse(%q) = %v, %v", s, int(sig), c, again, err)
			}
		}
		if again, _ := Parse(name); Name(again) != name || Full(again) != full {
			t.Fatalf("names of %d are not canonical: %q/%q then %q/%q", int(sig), name, full, Name(again), Full(again))
		}
		if n, err := strconv.Atoi(s); err == nil {
			if n != int(sig) {
				t.Fatalf("Parse(%q) = %d", s, int(sig))
			}
		} else if u := strings.ToUpper(s); u != name && u != full {
			t.Fatalf("Parse(%q) = %s (%s), not the signal it names", s, full, name)
		}
	})
}
