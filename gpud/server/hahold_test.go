package server_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// electedHA is a member of a group that was just elected and takes
// charge at inCharge (nanoseconds since the epoch; 0: never): until then
// it is not the leader, and WaitLeader holds a caller for it, as
// *ha.Group does while its controller reloads. elected false makes it a
// follower, which holds nobody.
type electedHA struct {
	elected  bool
	inCharge atomic.Int64
}

func (h *electedHA) Leader() (bool, string) {
	at := h.inCharge.Load()
	return h.elected && at != 0 && time.Now().UnixNano() >= at, "https://c9:6817"
}

func (h *electedHA) WaitLeader(ctx context.Context, max time.Duration) (bool, string) {
	deadline := time.Now().Add(max)
	for h.elected && time.Now().Before(deadline) && ctx.Err() == nil {
		if ok, _ := h.Leader(); ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return h.Leader()
}

func (h *electedHA) Controllers(context.Context) (api.ControllersResponse, error) {
	return api.ControllersResponse{}, nil
}
func (h *electedHA) AddMember(context.Context, api.ControllerMember) error { return nil }
func (h *electedHA) RemoveMember(context.Context, string) error            { return nil }

// A newly elected leader holds a write while it takes charge and serves
// it then, instead of sending the client away with not_leader (to come
// back after its backoff); a follower answers not_leader at once.
func TestElectedLeaderHoldsWrites(t *testing.T) {
	h := &electedHA{elected: true}
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithHA(h)}})
	c := client(t, addr)
	h.inCharge.Store(time.Now().Add(400 * time.Millisecond).UnixNano())
	start := time.Now()
	if _, err := c.Submit(ctxT(t), api.SubmitRequest{Job: jobSpec("held")}); err != nil {
		t.Fatalf("submit to a leader taking charge: %v; want it held and served", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("submit answered after %s, before the leader was in charge (400ms)", d)
	}

	f := &electedHA{}
	addr, _, _ = servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithHA(f)}})
	start = time.Now()
	_, err := client(t, addr).Submit(ctxT(t), api.SubmitRequest{Job: jobSpec("follower")})
	if !errors.Is(err, spec.ErrNotLeader) {
		t.Fatalf("submit to a follower: %v; want not_leader", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a follower answered not_leader after %s; want at once", d)
	}
}
