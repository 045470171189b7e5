package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

// memberTimeout bounds each member's answer to gpuq controllers: a member
// that is down must not hold up the others' rows.
const memberTimeout = 2 * time.Second

func controllersCommand() *cli.Command {
	return &cli.Command{
		Name:  "controllers",
		Usage: "list the controllers, the leader, and each one's Raft term and indices (scontrol ping); add or remove a member",
		Description: "Lists the members of the controller group with columns " +
			"ID ADDRESS STATE VOTER TERM COMMIT APPLIED CONTACT: STATE is leader, follower, candidate or unreachable, " +
			"COMMIT and APPLIED are the member's Raft commit and applied indices, CONTACT how long ago the leader last " +
			"heard from it. Every address in --controller is asked at once (each within 2s); each member reports its " +
			"own term and indices, the membership comes from the leader's answer (else any member's). A member whose " +
			"address did not answer (a warning names it) is unreachable, as is one the leader's heartbeats do not reach; " +
			"a member not in --controller is listed as the leader sees it. Term and indices a member did not report " +
			"itself show as -. A single controller (no [ha] in " +
			"gpud.toml) lists itself as the leader, with no term or indices.\n\n" +
			"gpuq controllers add and remove change the group's membership (admin token; the request goes to the leader).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON: the leader's ID and every member"},
			&cli.BoolFlag{Name: "noheader", Usage: "print no header line"},
		},
		Action: controllers,
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "add a controller to the HA group (POST /v1/controllers; admin)",
				ArgsUsage: " ",
				Description: "Adds member --id, whose Raft traffic is at --raft (host:port, its [ha] raft_listen) and whose API is " +
					"at --api (https://host:port), to the group. Start the new member first with join = true in its [ha] " +
					"section and copies of a member's <state_dir>/tls and <state_dir>/auth: it catches up from a snapshot " +
					"and the log, as a voter. Then add its address to GPUD_CONTROLLER and node.toml's controller lists.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "id", Required: true, Usage: "the new member's [ha] id"},
					&cli.StringFlag{Name: "raft", Required: true, Usage: "the new member's Raft address, host:port"},
					&cli.StringFlag{Name: "api", Required: true, Usage: "the new member's API address, https://host:port"},
				},
				Action: addController,
			},
			{
				Name:      "remove",
				Usage:     "remove a controller from the HA group (DELETE /v1/controllers/ID; admin)",
				ArgsUsage: "ID",
				Description: "Removes member ID from the group's configuration: the others stop replicating to it and " +
					"no longer count it for the majority. Removing the leader makes the others elect a new one. Stop the " +
					"removed member's gpud controller afterwards, and take its address out of GPUD_CONTROLLER and node.toml.",
				Action: removeController,
			},
		},
	}
}

func controllers(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq controllers takes no arguments or add/remove, got %q", args[0])
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	res, warnings, err := mergeControllers(cl.ControllersOfEach(c.Context, memberTimeout))
	if err != nil {
		return fmt.Errorf("list controllers: %w", err)
	}
	for _, w := range warnings {
		fmt.Fprintf(c.App.ErrWriter, "gpuq: warning: %s\n", w)
	}
	if c.Bool("json") {
		return format.WriteJSON(c.App.Writer, res)
	}
	if res.Leader == "" {
		fmt.Fprintln(c.App.ErrWriter, "gpuq: warning: the group has no leader now (an election is under way, or too few members are up)")
	}
	return format.WriteControllers(c.App.Writer, res, time.Now(), c.Bool("noheader"))
}

// mergeControllers makes one list of the members' own answers: the
// membership and leader from the leader's answer (else the first one),
// each member's state, term and indices from its own answer. It warns of
// each address that did not answer, and fails only when none did.
func mergeControllers(answers []api.MemberAnswer) (api.ControllersResponse, []string, error) {
	var base *api.ControllersResponse
	own := map[string]api.ControllerMember{}
	var warnings []string
	var errs []error
	for i := range answers {
		a := &answers[i]
		if a.Err != nil {
			warnings = append(warnings, fmt.Sprintf("controller %s did not answer: %v", a.Addr, a.Err))
			errs = append(errs, fmt.Errorf("%s: %w", a.Addr, a.Err))
			continue
		}
		if base == nil || (a.Resp.Self != "" && a.Resp.Self == a.Resp.Leader && base.Self != base.Leader) {
			base = &a.Resp
		}
		for _, m := range a.Resp.Members {
			if a.Resp.Self != "" && m.ID == a.Resp.Self {
				own[m.ID] = m
			}
		}
	}
	if base == nil {
		return api.ControllersResponse{}, nil, errors.Join(errs...)
	}
	out := api.ControllersResponse{Leader: base.Leader, Self: base.Self}
	for _, m := range base.Members {
		if o, ok := own[m.ID]; ok {
			m.State, m.Term, m.CommitIndex, m.AppliedIndex = o.State, o.Term, o.CommitIndex, o.AppliedIndex
		} else if m.State != "leader" && didNotAnswer(answers, m.APIAddress) {
			m.State = "unreachable" // asked, and silent
		}
		out.Members = append(out.Members, m)
	}
	return out, warnings, nil
}

// didNotAnswer reports whether addr is one of the addresses asked that
// did not answer.
func didNotAnswer(answers []api.MemberAnswer, addr string) bool {
	for _, a := range answers {
		if a.Err != nil && addr != "" && api.SameController(a.Addr, addr) {
			return true
		}
	}
	return false
}

func addController(c *cli.Context) error {
	if c.NArg() > 0 {
		return invalid("gpuq controllers add takes --id, --raft and --api, no arguments; got %q", c.Args().First())
	}
	apiAddr := c.String("api")
	if !strings.HasPrefix(apiAddr, "https://") {
		return invalid("--api %q: give the new member's https://host:port (its [controller] listen_tcp)", apiAddr)
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	m := api.ControllerMember{ID: c.String("id"), RaftAddress: c.String("raft"), APIAddress: apiAddr}
	res, err := cl.AddController(c.Context, m)
	if err != nil {
		return fmt.Errorf("add controller %s: %w", m.ID, err)
	}
	return format.WriteControllers(c.App.Writer, res, time.Now(), false)
}

func removeController(c *cli.Context) error {
	if c.NArg() != 1 {
		return invalid("gpuq controllers remove takes one member ID (gpuq controllers lists them)")
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, time.Minute)
	defer cancel()
	res, err := cl.RemoveController(ctx, c.Args().First())
	if err != nil {
		return fmt.Errorf("remove controller %s: %w", c.Args().First(), err)
	}
	return format.WriteControllers(c.App.Writer, res, time.Now(), false)
}
