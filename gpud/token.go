package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/daemon"
)

// tokenCommand is `gpud token issue` and `gpud token join`
// (daemon.IssueToken says why tokens are minted from the key file, not
// through the API).
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
				tok, err := daemon.JoinToken(cfg)
				if err != nil {
					return err
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
	tok, err := daemon.IssueToken(cfg, daemon.TokenRequest{User: c.String("user"), UID: c.String("uid"), Role: c.String("role"),
		Node: c.String("node"), TTL: c.Duration("ttl")}, c.App.ErrWriter)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer, tok)
	return nil
}
