package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// Token lifespans of POST /v1/token (scontrol token [lifespan=]): Slurm's
// default, and the longest a caller gets (root may ask up to auth.MaxTTL,
// as gpud token issue gives).
const (
	defaultTokenLife = 30 * time.Minute
	maxTokenLife     = 24 * time.Hour
)

// tokenIssuer signs tokens (implemented by *auth.Keys).
type tokenIssuer interface {
	Issue(c auth.Claims, ttl time.Duration) (string, error)
}

// userToken is POST /v1/token: a token for the caller itself, with the
// caller's role as its ceiling. It answers on the unix socket only, where
// the caller is its peer credentials (as Slurm's scontrol token is
// authenticated by munge, not by a token): no token mints tokens, so a
// stolen one cannot make others that its revocation would not reach.
func (s *Server) userToken(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := notNode(id, "a user token"); err != nil {
		s.refuse(w, r, err)
		return
	}
	if id.remote {
		s.refuse(w, r, denied("a token is issued only on the controller's unix socket, to the user connected there (scontrol token on a host with the socket); over TCP ask an admin (gpud token issue)"))
		return
	}
	iss, ok := s.tokens.(tokenIssuer)
	if !ok {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller issues no tokens (no TCP listener with a token key); use its unix socket"))
		return
	}
	if !id.caller.Known || id.caller.User == "" {
		s.refuse(w, r, denied("a token needs an identified caller with a user name; %s has none", id.name()))
		return
	}
	var req api.TokenRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	life := time.Duration(req.Lifespan) * time.Second
	limit := maxTokenLife
	if id.caller.UID == 0 {
		limit = auth.MaxTTL
	}
	switch {
	case req.Lifespan < 0:
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "lifespan=%d: give seconds > 0", req.Lifespan))
		return
	case life == 0:
		life = defaultTokenLife
	case life > limit:
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "lifespan=%d is over the %d seconds a token may live; ask for less", req.Lifespan, int64(limit/time.Second)))
		return
	}
	tok, err := iss.Issue(auth.Claims{User: id.caller.User, UID: id.caller.UID, GID: id.caller.GID, Role: id.role}, life)
	if err != nil {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "issue a token for %s: %v", id.name(), err))
		return
	}
	noteTarget(w, fmt.Sprintf("token for %s, %ds", id.caller.User, int64(life/time.Second)))
	s.writeJSON(w, api.TokenResponse{Token: tok, Expires: s.now().Add(life).UTC()})
}
