package main

import (
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
)

// tokenCommand is `gpud token issue`. It signs with the controller's key
// file (<state_dir>/auth/token.key, or [auth] token_key) directly, on the
// controller host: whoever can read that file (root) is the admin who may
// mint tokens. There is deliberately no API endpoint that mints tokens, so
// a stolen admin token cannot make more (or longer-lived) ones.
func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "manage bearer tokens for remote (https) users and node agents",
		Subcommands: []*cli.Command{{
			Name:  "issue",
			Usage: "print a signed token (run as root on the controller host)",
			Description: "Prints a token for --user (or, with --role node, for --node). Save it with mode 600 in\n" +
				"~/.config/gpud/token of the user, or pass it in GPUD_TOKEN; the CA certificate the client\n" +
				"must trust is <state_dir>/tls/ca.pem (copy it to ~/.config/gpud/ca.pem or set GPUD_CA).\n" +
				"A user's role is the lower of --role and what [auth] operators/admins grant.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config", Usage: "controller configuration file (TOML)", Value: defaultControllerConfig},
				&cli.StringFlag{Name: "state-dir", Usage: "controller state dir holding auth/token.key (overrides [controller] state_dir)"},
				&cli.StringFlag{Name: "user", Usage: "user name the token identifies (jobs run as this user)"},
				&cli.StringFlag{Name: "uid", Usage: "uid (and gid with UID:GID) when the user is not known on this host"},
				&cli.StringFlag{Name: "role", Usage: "user, operator, admin or node", Value: auth.RoleUser},
				&cli.StringFlag{Name: "node", Usage: "node name a --role node token is bound to"},
				&cli.DurationFlag{Name: "ttl", Usage: "lifetime (at most 366 days)", Value: 24 * time.Hour},
			},
			Action: issueToken,
		}, {
			Name:  "join",
			Usage: "print the join token node agents use to get their certificates (run as root on the controller host)",
			Description: "Prints the cluster's join token (made on first use, in <state_dir>/auth/join.token). Put it in\n" +
				"a file of mode 600 on each node and name that file in node.toml's join_token_file: on first\n" +
				"start the agent gets a node certificate signed by the controller's CA and authenticates with\n" +
				"it (mTLS) from then on. Whoever holds the token may join a node of any name: keep it secret;\n" +
				"delete the file and restart the controller to change it.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config", Usage: "controller configuration file (TOML)", Value: defaultControllerConfig},
				&cli.StringFlag{Name: "state-dir", Usage: "controller state dir (overrides [controller] state_dir)"},
			},
			Action: func(c *cli.Context) error {
				cfg, err := config.LoadController(configPath(c))
				if err != nil {
					return err
				}
				if c.IsSet("state-dir") {
					cfg.Controller.StateDir = c.String("state-dir")
				}
				tok, err := auth.LoadJoinToken(joinTokenPath(cfg))
				if err != nil {
					return fmt.Errorf("token join: %w (run as root on the controller host)", err)
				}
				fmt.Fprintln(c.App.Writer, tok)
				return nil
			},
		}},
	}
}

func issueToken(c *cli.Context) error {
	cfg, err := config.LoadController(configPath(c))
	if err != nil {
		return err
	}
	if c.IsSet("state-dir") {
		cfg.Controller.StateDir = c.String("state-dir")
	}
	cl := auth.Claims{User: c.String("user"), Role: c.String("role"), Node: c.String("node")}
	switch {
	case cl.Role == auth.RoleNode:
		if cl.Node == "" {
			return usagef("token issue: --role node needs --node NAME")
		}
		if cl.User == "" {
			cl.User = cl.Node
		}
	case cl.User == "":
		return usagef("token issue: --user is required")
	case cl.Node != "":
		return usagef("token issue: --node is only for --role node")
	default:
		if cl.UID, cl.GID, err = lookupIDs(cl.User, c.String("uid")); err != nil {
			return usagef("token issue: %v", err)
		}
	}
	keys, err := auth.LoadKeys(cfg.TokenKeyPath(), cfg.Auth.ClusterName)
	if err != nil {
		return fmt.Errorf("token issue: %w (run as root on the controller host)", err)
	}
	tok, err := keys.Issue(cl, c.Duration("ttl"))
	if err != nil {
		return usagef("%v", err)
	}
	if auth.Rank(cl.Role) > auth.Rank(auth.RoleUser) && !granted(cfg.Auth, cl.User, cl.Role) {
		fmt.Fprintf(c.App.ErrWriter, "gpud: warning: %s is not in [auth] %ss; the token acts as role user until the config grants it\n", cl.User, cl.Role)
	}
	if vc, err := keys.Verify(tok); err == nil {
		fmt.Fprintf(c.App.ErrWriter, "gpud: token id %s (list it in [auth] revoked_tokens to revoke the token before it expires)\n", vc.ID)
	}
	fmt.Fprintln(c.App.Writer, tok)
	return nil
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
