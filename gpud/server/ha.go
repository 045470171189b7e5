package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// HA is the controller's Raft group (gpud/ha) when it runs as one member
// of several; a single controller has none.
type HA interface {
	// Leader says whether this member serves writes and the node protocol
	// now, and otherwise the leader's API address ("" during an election).
	Leader() (leading bool, leaderAPI string)
	// Controllers lists the members as this one sees them.
	Controllers(ctx context.Context) (api.ControllersResponse, error)
	// AddMember and RemoveMember change the membership (leader only).
	AddMember(ctx context.Context, m api.ControllerMember) error
	RemoveMember(ctx context.Context, id string) error
}

// leaderWaiter is an HA group whose new leader can hold calls while it
// takes charge (*ha.Group): WaitLeader returns once this member leads (its
// controller in charge), at once when it is not the elected leader, or
// after max, with what Leader says then.
type leaderWaiter interface {
	WaitLeader(ctx context.Context, max time.Duration) (leading bool, leaderAPI string)
}

// electionHold is how long a newly elected leader holds a write or node
// call while it takes charge (a Raft barrier and a reload of its state):
// served as soon as it is in charge, instead of answered not_leader and
// sent again after the client's backoff (leaderWaiter).
const electionHold = 3 * time.Second

// replicaReader is an HA group that refreshes a follower's view on
// demand (*ha.Group): ReadReplica is called before a follower answers a
// read from it.
type replicaReader interface{ ReadReplica(ctx context.Context) }

// WithHA makes the server one member's of an HA group: a follower answers
// every write and every node-protocol call with not_leader (HTTP 421)
// naming the leader in api.HeaderLeader, and its reads, served from its
// replica, carry api.HeaderStale. The client retries at the leader: a
// redirect, not a forward (docs/ha.md says why).
func WithHA(h HA) Option { return func(s *Server) { s.ha, s.group = h, h } }

func (s *Server) haRoutes() {
	v := "/" + api.Version
	s.mux.Handle("POST "+v+"/controllers", s.recordAudit(http.HandlerFunc(s.addController)))
	s.mux.Handle("DELETE "+v+"/controllers/{id}", s.recordAudit(http.HandlerFunc(s.removeController)))
}

// leaderGate answers on a follower what only the leader may: every call
// that is not a GET, and the node protocol's long poll.
func (s *Server) leaderGate(next http.Handler) http.Handler {
	if s.ha == nil {
		return next
	}
	v := "/" + api.Version + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/healthz" || p == "/metrics" || p == v+"controllers" {
			next.ServeHTTP(w, r)
			return
		}
		poll := strings.HasPrefix(p, v+"nodes/") && strings.HasSuffix(p, "/assignments")
		leading, leader := s.ha.Leader()
		if leading && poll {
			// A long poll may outlast the leadership: its answer is
			// checked again when it is written.
			next.ServeHTTP(&fenced{ResponseWriter: w, s: s, r: r}, r)
			return
		}
		if leading {
			next.ServeHTTP(w, r)
			return
		}
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if lw, ok := s.ha.(leaderWaiter); ok && (!read || poll) {
			if leading, leader = lw.WaitLeader(r.Context(), electionHold); leading {
				if poll {
					next.ServeHTTP(&fenced{ResponseWriter: w, s: s, r: r}, r)
				} else {
					next.ServeHTTP(w, r)
				}
				return
			}
		}
		if leader != "" {
			w.Header().Set(api.HeaderLeader, leader)
		}
		if read && !poll {
			if rr, ok := s.ha.(replicaReader); ok {
				rr.ReadReplica(r.Context())
			}
			w.Header().Set(api.HeaderStale, "true")
			next.ServeHTTP(w, r)
			return
		}
		s.notLeader(w, r, leader)
	})
}

func (s *Server) notLeader(w http.ResponseWriter, r *http.Request, leader string) {
	where := "no leader is elected yet; retry in a second"
	if leader != "" {
		w.Header().Set(api.HeaderLeader, leader)
		where = "the leader is " + leader
	}
	s.writeError(w, r, spec.Errorf(spec.ErrNotLeader, "this controller is a follower of its HA group and does not take %s %s: %s", r.Method, r.URL.Path, where))
}

// fenced answers a node's long poll only if this member still leads
// when the answer is written; otherwise not_leader: a deposed leader
// hands out no assignment.
type fenced struct {
	http.ResponseWriter
	s                *Server
	r                *http.Request
	decided, refused bool
}

func (f *fenced) decide() bool {
	if !f.decided {
		f.decided = true
		if ok, leader := f.s.ha.Leader(); !ok {
			f.refused = true
			f.s.notLeader(f.ResponseWriter, f.r, leader)
		}
	}
	return !f.refused
}

func (f *fenced) WriteHeader(code int) {
	if f.decide() {
		f.ResponseWriter.WriteHeader(code)
	}
}

// Unwrap lets http.ResponseController flush an assignments watch stream
// (watch.go) through it.
func (f *fenced) Unwrap() http.ResponseWriter { return f.ResponseWriter }

func (f *fenced) Write(b []byte) (int, error) {
	if f.decide() {
		return f.ResponseWriter.Write(b)
	}
	return len(b), nil
}

func (s *Server) addController(w http.ResponseWriter, r *http.Request) {
	if err := requireRole(who(r), auth.RoleAdmin, "adding a controller to the HA group"); err != nil {
		s.refuse(w, r, err)
		return
	}
	if s.ha == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "this controller runs alone (no [ha] in its gpud.toml); members are added to an HA group"))
		return
	}
	var m api.ControllerMember
	if err := decode(w, r, &m); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.ha.AddMember(r.Context(), m); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.controllers(w, r)
}

func (s *Server) removeController(w http.ResponseWriter, r *http.Request) {
	if err := requireRole(who(r), auth.RoleAdmin, "removing a controller from the HA group"); err != nil {
		s.refuse(w, r, err)
		return
	}
	if s.ha == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "this controller runs alone (no [ha] in its gpud.toml); there is no member to remove"))
		return
	}
	if err := s.ha.RemoveMember(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.controllers(w, r)
}
