package app

import (
	"fmt"
	"time"

	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

func controllersCommand() *cli.Command {
	return &cli.Command{
		Name:  "controllers",
		Usage: "list the controllers, the leader, and each one's Raft term and indices (scontrol ping)",
		Description: "Lists the members of the controller group as the controller that answers sees them, with columns " +
			"ID ADDRESS STATE VOTER TERM COMMIT APPLIED CONTACT: STATE is leader, follower, candidate or unreachable, " +
			"COMMIT and APPLIED are the member's Raft commit and applied indices, CONTACT how long ago the leader last " +
			"heard from it. A single controller (no [ha] in gpud.toml) lists itself as the leader, with term and " +
			"indices 0. With a list of addresses in --controller, any member that answers will do.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON: the leader's ID and every member"},
			&cli.BoolFlag{Name: "noheader", Usage: "print no header line"},
		},
		Action: controllers,
	}
}

func controllers(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq controllers takes no arguments, got %q", args[0])
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	res, err := cl.Controllers(c.Context)
	if err != nil {
		return fmt.Errorf("list controllers: %w", err)
	}
	if c.Bool("json") {
		return format.WriteJSON(c.App.Writer, res)
	}
	if res.Leader == "" {
		fmt.Fprintln(c.App.ErrWriter, "gpuq: warning: the group has no leader now (an election is under way, or too few members are up)")
	}
	return format.WriteControllers(c.App.Writer, res, time.Now(), c.Bool("noheader"))
}
