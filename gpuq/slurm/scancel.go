package slurm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

var scancelSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "user", Short: 'u', Arg: getopt.Required},
	{Long: "me"},
	{Long: "state", Short: 't', Arg: getopt.Required},
	{Long: "name", Short: 'n', Arg: getopt.Required},
	{Long: "jobname", Arg: getopt.Required},
	{Long: "partition", Short: 'p', Arg: getopt.Required},
	{Long: "account", Short: 'A', Arg: getopt.Required},
	{Long: "qos", Short: 'q', Arg: getopt.Required},
	{Long: "signal", Short: 's', Arg: getopt.Required},
	{Long: "batch", Short: 'b'},
	{Long: "full", Short: 'f'},
	{Long: "interactive", Short: 'i'},
	{Long: "nodelist", Short: 'w', Arg: getopt.Required},
}, common...)}

func (c *Cmd) scancel(ctx context.Context) error {
	ps, rest, err := c.parse(scancelSet)
	if done, err := c.handled(err, "[-s SIGNAL] [-u USER|--me] [-t STATE] [-n NAME] [-p PART] [-A ACCT] [JOBID[_TASK]...]"); done || err != nil {
		return err
	}
	if getopt.Has(ps, "interactive") {
		return invalid("--interactive is not supported; list the jobs with squeue and name them")
	}
	sels, err := parseSels(rest)
	if err != nil {
		return err
	}
	req := api.JobActionRequest{}
	if v, ok := getopt.Last(ps, "signal"); ok {
		req.Signal = v
		// As Slurm's scancel: a signal goes to the job's steps and not
		// to the batch shell; -b to the batch shell only, -f to every
		// process of the job. Without --signal they cancel.
		switch {
		case getopt.Has(ps, "full"):
			req.SignalTarget = spec.SignalFull
		case getopt.Has(ps, "batch"):
			req.SignalTarget = spec.SignalBatch
		default:
			req.SignalTarget = spec.SignalSteps
		}
	}
	var steps []jobSel
	for _, s := range sels {
		if s.step != "" {
			steps = append(steps, s)
		}
	}
	if len(steps) > 0 {
		if len(steps) < len(sels) || getopt.Has(ps, "batch") || getopt.Has(ps, "full") {
			return invalid("name either steps (JOB.STEP) or jobs, and no -b/-f with steps")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, s := range steps {
			sreq := api.JobActionRequest{Signal: req.Signal, Step: s.step}
			if _, err := cl.RefAction(ctx, s.ref, "cancel", sreq); err != nil {
				errs = append(errs, fmt.Errorf("Kill job error on job step id %s.%s: %w", s.ref, s.step, err))
			}
		}
		return errors.Join(errs...)
	}
	users := c.users(ps)
	states, _, err := parseStates(getopt.All(ps, "state"))
	if err != nil {
		return err
	}
	names := splitList(append(getopt.All(ps, "name"), getopt.All(ps, "jobname")...)...)
	parts := splitList(getopt.All(ps, "partition")...)
	accts := splitList(getopt.All(ps, "account")...)
	qos := splitList(getopt.All(ps, "qos")...)
	nodes := splitList(getopt.All(ps, "nodelist")...)
	filtered := len(users) > 0 || len(states) > 0 || len(names) > 0 || len(parts) > 0 || len(accts) > 0 || len(qos) > 0 || len(nodes) > 0
	if len(sels) == 0 && !filtered {
		return invalid("no job identification provided; give job ids or a filter (-u, --me, -t, -n, -p, -A)")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if filtered && req.Signal == "" && len(nodes) == 0 && !slices.ContainsFunc(sels, func(s jobSel) bool { return s.ref.IsTask }) {
		// One call and one transaction on the controller, however many
		// jobs match (bare ids here are jobs or whole arrays' first ids).
		f := api.JobFilter{Users: users, Partitions: parts, Accounts: accts, States: states}
		for _, s := range sels {
			f.IDs = append(f.IDs, s.ref.ID)
		}
		resp, err := cl.CancelJobs(ctx, api.CancelJobsRequest{Filter: f, Names: names, QOS: qos})
		if err != nil {
			return fmt.Errorf("cancel jobs: %w", err)
		}
		if resp.Skipped > 0 && getopt.Has(ps, "verbose") {
			c.warn("%d matching jobs were not cancelled (another user's, or already ending)", resp.Skipped)
		}
		return nil
	}
	var refs []spec.JobRef
	if !filtered {
		for _, s := range sels {
			refs = append(refs, s.ref)
		}
	} else {
		jobs, err := cl.Jobs(ctx, api.JobFilter{Users: users, Partitions: parts, Accounts: accts, States: states, View: api.ViewBrief})
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		for i := range jobs {
			j := &jobs[i]
			if len(sels) > 0 && !slices.ContainsFunc(sels, func(s jobSel) bool { return s.matches(j) }) ||
				len(names) > 0 && !slices.Contains(names, j.Name) || len(qos) > 0 && !slices.Contains(qos, j.QOS) ||
				len(nodes) > 0 && !slices.ContainsFunc(j.Nodes, func(n string) bool { return slices.Contains(nodes, n) }) {
				continue
			}
			refs = append(refs, spec.JobRef{ID: j.ID})
		}
	}
	action := "cancel"
	var errs []error
	for _, ref := range refs {
		if _, err := cl.RefAction(ctx, ref, action, req); err != nil {
			// As Slurm's scancel: cancelling a job that already ended
			// (ESLURM_ALREADY_DONE) or that the controller does not know
			// (ESLURM_INVALID_JOB_ID) is no error, and says so only under
			// -v; workflow tools cancel jobs that may have just ended.
			// Signalling one is an error.
			if req.Signal == "" && (errors.Is(err, spec.ErrConflict) || errors.Is(err, spec.ErrNotFound)) {
				if getopt.Has(ps, "verbose") {
					fmt.Fprintf(c.Stderr, "%s: error: Kill job error on job id %s: %v\n", c.Name, ref, err)
				}
				continue
			}
			errs = append(errs, fmt.Errorf("Kill job error on job id %s: %w", ref, err))
		}
	}
	return errors.Join(errs...)
}
