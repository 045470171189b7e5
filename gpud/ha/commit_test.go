package ha

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/gpud/gpud/gpud/spec"
)

// TestCommitErrorMapping: each error raft.Apply can return reaches clients
// as not_leader (421, retried: nothing was logged) only when raft refused
// the entry before appending it, and as unavailable (503: it may have
// been committed) otherwise.
func TestCommitErrorMapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{raft.ErrNotLeader, spec.ErrNotLeader},
		{raft.ErrLeadershipTransferInProgress, spec.ErrNotLeader},
		{raft.ErrEnqueueTimeout, spec.ErrNotLeader},
		{fmt.Errorf("wrapped: %w", raft.ErrEnqueueTimeout), spec.ErrNotLeader},
		{raft.ErrLeadershipLost, spec.ErrUnavailable},
		{raft.ErrRaftShutdown, spec.ErrUnavailable},
		{raft.ErrAbortedByRestore, spec.ErrUnavailable},
		{errors.New("disk I/O error"), spec.ErrUnavailable},
	} {
		got := commitError(c.err)
		if !errors.Is(got, c.want) {
			t.Errorf("commitError(%v) = %v; want %v", c.err, got, c.want)
		}
		other := spec.ErrUnavailable
		if c.want == spec.ErrUnavailable {
			other = spec.ErrNotLeader
		}
		if errors.Is(got, other) {
			t.Errorf("commitError(%v) = %v is also %v", c.err, got, other)
		}
	}
}
