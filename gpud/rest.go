package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/daemon"
	"github.com/gpud/gpud/gpud/slurmrest"
)

// restCommand is gpud rest, also run as slurmrestd (main maps the name):
// Slurm's REST API for clients written against slurmrestd, forwarded to a
// controller that answers it (docs/slurmrestd.md).
func restCommand() *cli.Command {
	return &cli.Command{
		Name:      "rest",
		Usage:     "serve Slurm's REST API (slurmrestd) in front of a controller",
		ArgsUsage: "[host]:port|https://[host]:port|unix:/path ...",
		Description: "Listens where slurmrestd would (its arguments, or SLURMRESTD_LISTEN, comma-separated) and\n" +
			"forwards Slurm's REST API (data_parser v0.0.42-v0.0.45) to the controller, which authenticates\n" +
			"each request (X-SLURM-USER-TOKEN from scontrol token, or Authorization: Bearer) and applies\n" +
			"the same rules as its own API. Plain HTTP is served on loopback and unix sockets; elsewhere\n" +
			"give --tls-cert/--tls-key or --plain-http. The controller also serves the API itself on its\n" +
			"socket and TLS port, so gpud rest is only needed where clients expect slurmrestd's port (6820).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "controller", Usage: "controller address (unix:///path.sock or https://host:port); else $GPUD_CONTROLLER", EnvVars: []string{api.EnvController}, Value: "unix:///var/lib/gpud/gpud.sock"},
			&cli.StringFlag{Name: "ca", Usage: "CA of an https:// controller (else $GPUD_CA)"},
			&cli.StringFlag{Name: "tls-cert", Usage: "serve TCP over TLS with this certificate (PEM)"},
			&cli.StringFlag{Name: "tls-key", Usage: "key of --tls-cert (PEM)"},
			&cli.BoolFlag{Name: "plain-http", Usage: "allow plain HTTP on addresses off this host (tokens readable on the network)"},
			&cli.StringFlag{Name: "d", Usage: "slurmrestd's data_parser plugins; \"list\" prints those served"},
			&cli.StringFlag{Name: "a", Usage: "slurmrestd's auth plugins: accepted; gpud takes tokens (rest_auth/jwt) and, on its own socket, its own uid (rest_auth/local)"},
			&cli.StringFlag{Name: "s", Usage: "slurmrestd's OpenAPI plugins: accepted; gpud serves slurmctld, slurmdbd and util"},
		}, logFlags()...),
		Action: func(c *cli.Context) error {
			if c.String("d") == "list" {
				for _, v := range slurmrest.Versions {
					fmt.Fprintf(c.App.Writer, "data_parser/v0.0.%d\n", v)
				}
				return nil
			}
			listen := c.Args().Slice()
			if len(listen) == 0 {
				for l := range strings.SplitSeq(os.Getenv("SLURMRESTD_LISTEN"), ",") {
					if l = strings.TrimSpace(l); l != "" {
						listen = append(listen, l)
					}
				}
			}
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			return daemon.RunRest(c.Context, daemon.RestOptions{Listen: listen, Controller: c.String("controller"), CAFile: c.String("ca"),
				TLSCert: c.String("tls-cert"), TLSKey: c.String("tls-key"), PlainHTTP: c.Bool("plain-http"), Log: log})
		},
	}
}
