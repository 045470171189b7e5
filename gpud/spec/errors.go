package spec

import (
	"errors"
	"fmt"
)

// Error kinds. Callers test them with errors.Is; the server maps them to HTTP
// statuses and the CLIs to exit codes (2 for Invalid, 3 for PermissionDenied
// and Refused, 1 for the rest).
var (
	ErrNotFound         = errors.New("not found")
	ErrInvalid          = errors.New("invalid")
	ErrConflict         = errors.New("conflict")
	ErrUnavailable      = errors.New("unavailable")
	ErrPermissionDenied = errors.New("permission denied")
	// ErrRefused is a policy refusal that is not about identity: a limit,
	// a closed partition, a full state disk.
	ErrRefused = errors.New("refused by policy")
	// ErrNotLeader is a write sent to a controller that is not the Raft
	// leader (issue 16): the client retries at the leader it names.
	ErrNotLeader = errors.New("not the leader")
)

// kindError carries a message and a kind; errors.Is matches the kind while
// Error() shows only the message, so users read "job 12 not found" rather
// than "not found: job 12 not found".
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

// Errorf formats an error of the given kind.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// KindOf returns the kind of err, or nil if it has none of ours.
func KindOf(err error) error {
	for _, k := range []error{ErrNotFound, ErrInvalid, ErrConflict, ErrUnavailable, ErrPermissionDenied, ErrRefused, ErrNotLeader} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}
