package checkpoint

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func TestParseSignal(t *testing.T) {
	t.Parallel()
	type parsed struct {
		Sig       syscall.Signal
		Seconds   int
		BatchOnly bool
	}
	tests := []struct {
		in      string
		want    parsed
		wantErr string // substring; empty means success
	}{
		{in: "USR1", want: parsed{syscall.SIGUSR1, 60, false}},
		{in: "SIGUSR2", want: parsed{syscall.SIGUSR2, 60, false}},
		{in: "sigterm@120", want: parsed{syscall.SIGTERM, 120, false}},
		{in: "10@300", want: parsed{syscall.SIGUSR1, 300, false}},
		{in: "B:USR1@90", want: parsed{syscall.SIGUSR1, 90, true}},
		{in: "b:15", want: parsed{syscall.SIGTERM, 60, true}},
		{in: "INT@0", want: parsed{syscall.SIGINT, 0, false}},
		{in: "34@65535", want: parsed{syscall.Signal(34), 65535, false}},
		{in: "", wantErr: "no signal given"},
		{in: "@60", wantErr: "no signal given"},
		{in: "B:", wantErr: "no signal given"},
		{in: "FOO", wantErr: `unknown signal "FOO"`},
		{in: "SIG", wantErr: `unknown signal "SIG"`},
		{in: "USR1@", wantErr: "seconds"},
		{in: "USR1@-5", wantErr: "seconds"},
		{in: "USR1@+5", wantErr: "seconds"},
		{in: "USR1@65536", wantErr: "seconds"},
		{in: "USR1@1m", wantErr: "seconds"},
		{in: "0", wantErr: "out of range"},
		{in: "65", wantErr: "out of range"},
		{in: "KILL", wantErr: "cannot be caught"},
		{in: "B:9@30", wantErr: "cannot be caught"},
		{in: "SIGSTOP", wantErr: "cannot be caught"},
		{in: "R:USR1", wantErr: "option R"},
		{in: "X:USR1", wantErr: `unknown option "X"`},
		{in: " USR1", wantErr: "unknown signal"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			sig, secs, batch, err := ParseSignal(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "[B:]SIG[@SECONDS]") {
					t.Fatalf("ParseSignal(%q) error = %v; want one containing %q and the allowed form", tc.in, err, tc.wantErr)
				}
				if !errors.Is(err, spec.ErrInvalid) {
					t.Errorf("ParseSignal(%q) error kind = %v, want spec.ErrInvalid", tc.in, spec.KindOf(err))
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSignal(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, parsed{sig, secs, batch}); diff != "" {
				t.Errorf("ParseSignal(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
