package app

import (
	"fmt"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "list the audit log of state-changing API calls (operators and admins)",
		Description: "Lists the calls that changed state (submit, cancel, hold, release, requeue, drain, resume, " +
			"reconfigure, ...; not the node protocol) made between --starttime (default: midnight today) and " +
			"--endtime (default: now), oldest first, with columns TIME ACTOR ROLE ORIGIN ACTION TARGET RESULT. " +
			"ORIGIN is unix (the controller's socket) or the TCP peer address; ACTION is the API route " +
			"(\"POST /v1/jobs/{id}/cancel\"); RESULT is the HTTP status with ok or the error the caller was shown, " +
			"refusals included. Entries are written every 200 ms, so a call shows up within a moment. " +
			"Only operators and admins may read the log; the API offers no way to change or delete it.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "starttime", Aliases: []string{"S"}, Usage: "window start, in the forms of gpuq acct --starttime (default: midnight today)"},
			&cli.StringFlag{Name: "endtime", Aliases: []string{"E"}, Usage: "window end, in the forms of gpuq acct --starttime (default: now)"},
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "only calls by this actor (a user name or uid)"},
			&cli.StringFlag{Name: "action", Usage: "only actions containing this text (e.g. cancel, /nodes/)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: an array of entries with every field"},
			&cli.BoolFlag{Name: "noheader", Aliases: []string{"n"}, Usage: "print no header line"},
		},
		Action: audit,
	}
}

func audit(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq audit takes no arguments, got %q; filter with -u and --action", args[0])
	}
	f := api.AuditFilter{Actor: c.String("user"), Action: c.String("action")}
	t := now()
	if f.Start, f.End, err = window(c, t, midnight(t), t); err != nil {
		return err
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	entries, err := cl.Audit(c.Context, f)
	if err != nil {
		return fmt.Errorf("list the audit log: %w", err)
	}
	if c.Bool("json") {
		return format.WriteAuditJSON(c.App.Writer, entries)
	}
	return format.WriteAudit(c.App.Writer, entries, c.Bool("noheader"))
}
