package slurm

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// ping is scontrol ping over GET /v1/controllers, in Slurm's lines:
// "Slurmctld(MODE) at HOST is UP|DOWN". Slurm's primary is the controller
// in charge, so the leader is the primary; the other members follow in
// the group's order as Slurm numbers backups (backup when there are two
// controllers, else backup1, backup2 ...). With no leader (an election)
// no line is primary. A member the answering controller cannot reach is
// DOWN. When no controller answers, each configured address is DOWN and
// the exit status is 1, as Slurm's when none answers.
func (c *Cmd) ping(ctx context.Context) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	res, err := cl.Controllers(ctx)
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && errors.Is(err, spec.ErrNotFound):
		// A controller from before GET /v1/controllers: it answered.
		addr := c.Controller
		if as := api.SplitControllers(addr); len(as) > 0 {
			addr = as[0]
		}
		fmt.Fprintf(c.Stdout, "Slurmctld(primary) at %s is UP\n", pingHost(addr, ""))
		return nil
	case err != nil:
		addrs := api.SplitControllers(c.Controller)
		for i, a := range addrs {
			c.pingLine(i, len(addrs), pingHost(a, ""), false)
		}
		return err
	}
	var ordered []api.ControllerMember
	for _, m := range res.Members {
		if res.Leader != "" && m.ID == res.Leader {
			ordered = append([]api.ControllerMember{m}, ordered...)
		} else {
			ordered = append(ordered, m)
		}
	}
	off := 0
	if res.Leader == "" {
		off = 1 // no primary: backup1, backup2 ...
	}
	for i, m := range ordered {
		c.pingLine(i+off, len(ordered)+off, pingHost(m.APIAddress, m.ID), m.State != "unreachable")
	}
	return nil
}

// pingLine prints Slurm's line for the controller at offset i of n.
func (c *Cmd) pingLine(i, n int, host string, up bool) {
	mode := fmt.Sprintf("backup%d", i)
	switch {
	case i == 0:
		mode = "primary"
	case i == 1 && n == 2:
		mode = "backup"
	}
	state := "DOWN"
	if up {
		state = "UP"
	}
	fmt.Fprintf(c.Stdout, "Slurmctld(%s) at %s is %s\n", mode, host, state)
}

// pingHost is the host Slurm would name: the host of an https address,
// else id (a controller reached over its socket is named by its ID, the
// hostname), else the address itself.
func pingHost(addr, id string) string {
	if u, err := url.Parse(addr); err == nil && u.Hostname() != "" && !strings.EqualFold(u.Scheme, "unix") {
		return u.Hostname()
	}
	if id != "" {
		return id
	}
	return addr
}
