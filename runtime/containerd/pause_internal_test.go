package containerd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpud/gpud/runtime"
)

// TestRetryFreezer: a failed freeze is tried again (runc's transient
// "unable to freeze"), up to freezerTries; a missing task is not.
func TestRetryFreezer(t *testing.T) {
	transient := errors.New("OCI runtime pause failed: unable to freeze: unknown")
	for _, tc := range []struct {
		name      string
		fails     int // tries that fail before one succeeds
		err       error
		wantCalls int
		wantErr   bool
	}{
		{"succeeds at once", 0, transient, 1, false},
		{"succeeds on the third try", 2, transient, 3, false},
		{"fails every try", 99, transient, freezerTries, true},
		{"missing task", 99, fmt.Errorf("pause task x: %w", runtime.ErrNotFound), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryFreezer(context.Background(), func() error {
				calls++
				if calls <= tc.fails {
					return tc.err
				}
				return nil
			})
			if calls != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Errorf("calls %d, err %v; want %d calls, error %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
