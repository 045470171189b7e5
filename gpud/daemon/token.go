package daemon

import (
	"errors"
	"fmt"
	"io"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/spec"
)

// TokenRequest is what `gpud token issue` asks for.
type TokenRequest struct {
	User string
	// UID is "UID" or "UID:GID" for a user this host does not know.
	UID  string
	Role string // user, operator, admin or node
	Node string // the node a node token is bound to
	TTL  time.Duration
}

// IssueToken signs a token with the controller's key file (<state_dir>/
// auth/token.key, or [auth] token_key) directly, on the controller host:
// whoever can read that file (root) is the admin who may mint tokens.
// There is deliberately no API endpoint that mints tokens, so a stolen
// admin token cannot make more (or longer-lived) ones. Notes for the
// admin (the token's id; a role the configuration does not grant) go to
// notes.
func IssueToken(cfg config.Controller, r TokenRequest, notes io.Writer) (string, error) {
	cl := auth.Claims{User: r.User, Role: r.Role, Node: r.Node}
	var err error
	switch {
	case cl.Role == auth.RoleNode:
		if cl.Node == "" {
			return "", spec.Errorf(spec.ErrInvalid, "token issue: --role node needs --node NAME")
		}
		if cl.User == "" {
			cl.User = cl.Node
		}
	case cl.User == "":
		return "", spec.Errorf(spec.ErrInvalid, "token issue: --user is required")
	case cl.Node != "":
		return "", spec.Errorf(spec.ErrInvalid, "token issue: --node is only for --role node")
	default:
		if cl.UID, cl.GID, err = lookupIDs(cl.User, r.UID); err != nil {
			return "", spec.Errorf(spec.ErrInvalid, "token issue: %v", err)
		}
	}
	keys, err := auth.LoadKeys(cfg.TokenKeyPath(), cfg.Auth.ClusterName)
	if err != nil {
		return "", fmt.Errorf("token issue: %w (run as root on the controller host)", err)
	}
	tok, err := keys.Issue(cl, r.TTL)
	if err != nil {
		return "", spec.Errorf(spec.ErrInvalid, "%v", err)
	}
	if auth.Rank(cl.Role) > auth.Rank(auth.RoleUser) && !granted(cfg.Auth, cl.User, cl.Role) {
		fmt.Fprintf(notes, "gpud: warning: %s is not in [auth] %ss; the token acts as role user until the config grants it\n", cl.User, cl.Role)
	}
	if vc, err := keys.Verify(tok); err == nil {
		fmt.Fprintf(notes, "gpud: token id %s (list it in [auth] revoked_tokens to revoke the token before it expires)\n", vc.ID)
	}
	return tok, nil
}

// JoinToken is the cluster's join token (made on first use, in
// <state_dir>/auth/join.token).
func JoinToken(cfg config.Controller) (string, error) {
	tok, err := auth.LoadJoinToken(joinTokenPath(cfg))
	if err != nil {
		return "", fmt.Errorf("token join: %w (run as root on the controller host)", err)
	}
	return tok, nil
}

func granted(a config.Auth, user, role string) bool {
	if user == "root" {
		return true
	}
	return slices.Contains(a.Admins, user) || role == auth.RoleOperator && slices.Contains(a.Operators, user)
}

// lookupIDs returns the uid and gid of name: from flag ("UID" or
// "UID:GID") when given, else from this host's user database.
func lookupIDs(name, flag string) (uid, gid uint32, err error) {
	if flag != "" {
		us, gs, hasGID := strings.Cut(flag, ":")
		u, err1 := strconv.ParseUint(us, 10, 32)
		g := u
		var err2 error
		if hasGID {
			g, err2 = strconv.ParseUint(gs, 10, 32)
		}
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("--uid=%q is not UID or UID:GID", flag)
		}
		return uint32(u), uint32(g), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q is not known on this host; pass --uid UID[:GID]", name)
	}
	uv, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gv, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("user %q has a non-numeric uid/gid; pass --uid", name)
	}
	return uint32(uv), uint32(gv), nil
}
