package exitcode

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/urfave/cli/v2"
)

func TestCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, OK},
		{"plain", errors.New("boom"), Runtime},
		{"unavailable", spec.Errorf(spec.ErrUnavailable, "down"), Runtime},
		{"not found", spec.Errorf(spec.ErrNotFound, "job 3 not found"), Runtime},
		{"invalid wrapped", fmt.Errorf("submit: %w", spec.Errorf(spec.ErrInvalid, "bad")), Usage},
		{"permission", spec.Errorf(spec.ErrPermissionDenied, "no"), Refused},
		{"refused", spec.Errorf(spec.ErrRefused, "limit"), Refused},
		{"exit coder", cli.Exit("", 42), 42},
		{"joined invalid wins", errors.Join(spec.Errorf(spec.ErrRefused, "a"), spec.Errorf(spec.ErrInvalid, "b")), Usage},
		{"joined refused over runtime", errors.Join(errors.New("x"), spec.Errorf(spec.ErrRefused, "a")), Refused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Code(tc.err); got != tc.want {
				t.Errorf("Code(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

func TestPrint(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	Print(&b, "gpuq", errors.Join(errors.New("cancel job 1: not found"), errors.New("cancel job 2: denied")))
	Print(&b, "gpuq", cli.Exit("", 3))
	want := "gpuq: cancel job 1: not found\ngpuq: cancel job 2: denied\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("Print (-want +got):\n%s", diff)
	}
}
