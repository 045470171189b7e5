package app

import (
	"fmt"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "list GPU health history (faults, probes, readmissions) or, with --rma, the GPUs to send back",
		Description: "Lists the health events of GPUs between --starttime (default: 7 days ago) and --endtime " +
			"(default: now), oldest first, with columns TIME NODE GPU SERIAL EVENT CODE CLASS ACTION DETAIL. EVENT is " +
			"fault (a finding of the node's health model: ACTION drain-gpu, drain-slice (one MIG instance) or drain-node took it out of service, log " +
			"only recorded it), probe-failed, readmit (a clean probe put the GPU back) or diag (a background " +
			"diagnostic of the idle GPU passed; one that fails is a fault diag-failed). CODE is the triage code " +
			"(xid79, ecc-dbe, row-remap-failed, temp, ...; see gpud.toml(5) [health]). Events are kept by the GPU's " +
			"board serial, so a GPU moved to another node keeps its history. --rma summarises the window by GPU, " +
			"RMA candidates first: a GPU with a fault that marks bad hardware (failed row remapping, XID 64, 79 or " +
			"95), two fatal faults, or a failed readmission probe.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "starttime", Aliases: []string{"S"}, Usage: "window start, in the forms of gpuq acct --starttime (default: 7 days ago)"},
			&cli.StringFlag{Name: "endtime", Aliases: []string{"E"}, Usage: "window end, in the forms of gpuq acct --starttime (default: now)"},
			&cli.StringSliceFlag{Name: "node", Aliases: []string{"w"}, Usage: "only GPUs of these nodes (repeat or comma-separate)"},
			&cli.StringSliceFlag{Name: "serial", Usage: "only GPUs with these board serials"},
			&cli.StringSliceFlag{Name: "uuid", Usage: "only GPUs with these UUIDs"},
			&cli.StringSliceFlag{Name: "event", Usage: "only these events: fault, probe-failed, readmit, diag"},
			&cli.StringSliceFlag{Name: "class", Usage: "only findings of these classes: fatal, degraded, info"},
			&cli.IntFlag{Name: "limit", Usage: "only the newest N events (0: all)"},
			&cli.BoolFlag{Name: "rma", Usage: "summarise by GPU serial: faults, probes, readmissions, RMA candidates first"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: an array of events (or of GPUs with --rma) with every field"},
			&cli.BoolFlag{Name: "noheader", Aliases: []string{"n"}, Usage: "print no header line"},
		},
		Action: gpuHealth,
	}
}

func gpuHealth(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq health takes no arguments, got %q; filter with --node, --serial, --uuid, --event and --class", args[0])
	}
	f := api.GPUEventQuery{Nodes: c.StringSlice("node"), Serials: c.StringSlice("serial"), UUIDs: c.StringSlice("uuid"),
		Kinds: c.StringSlice("event"), Classes: c.StringSlice("class"), Limit: c.Int("limit")}
	if f.Limit < 0 {
		return invalid("--limit %d: give a positive number of events, or 0 for all", f.Limit)
	}
	t := now()
	if f.Start, f.End, err = window(c, t, t.Add(-7*24*time.Hour), t); err != nil {
		return err
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	if c.Bool("rma") {
		gpus, err := cl.RMAReport(c.Context, f)
		if err != nil {
			return fmt.Errorf("read the RMA report: %w", err)
		}
		if c.Bool("json") {
			return format.WriteJSON(c.App.Writer, append([]api.RMARow{}, gpus...))
		}
		return format.WriteRMA(c.App.Writer, gpus, c.Bool("noheader"))
	}
	evs, err := cl.GPUEvents(c.Context, f)
	if err != nil {
		return fmt.Errorf("list GPU health events: %w", err)
	}
	if c.Bool("json") {
		if evs == nil {
			return format.WriteJSON(c.App.Writer, []struct{}{})
		}
		return format.WriteJSON(c.App.Writer, evs)
	}
	return format.WriteGPUEvents(c.App.Writer, evs, c.Bool("noheader"))
}
