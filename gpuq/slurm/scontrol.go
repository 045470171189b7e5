package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

var scontrolSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "help", Short: 'h'}, // in this command -h is --help
	{Long: "details", Short: 'd'},
	{Long: "oneliner", Short: 'o'},
	{Long: "all", Short: 'a'},
	{Long: "json"},
}, common...)}

func (c *Cmd) scontrol(ctx context.Context) error {
	ps, rest, err := c.parse(scontrolSet)
	if done, err := c.handled(err, "[-d] [-o] show job|node|partition|reservation|config|hostnames|hostlist [ID] | hold|release|requeue JOBID... | update JobId=N|NodeName=LIST|PartitionName=P|ReservationName=R KEY=VALUE... | create|delete reservation KEY=VALUE... | suspend|resume|top JOBID... | wait_job JOBID | ping | token [lifespan=SECONDS]"); done || err != nil {
		return err
	}
	if len(rest) == 0 {
		return invalid("no command given; use show job N, show node, show partition, show hostnames LIST, show hostlist LIST, hold, release, requeue or ping")
	}
	one := getopt.Has(ps, "oneliner")
	cmd, args := strings.ToLower(rest[0]), rest[1:]
	switch cmd {
	case "show":
		if len(args) == 0 {
			return invalid("show needs an entity: job, node, partition, reservation, config, hostnames or hostlist")
		}
		what, arg := strings.ToLower(args[0]), strings.Join(args[1:], ",")
		switch {
		case strings.HasPrefix("jobs", what) && what != "":
			return c.showJobs(ctx, arg, one, getopt.Has(ps, "json"), len(getopt.All(ps, "details")))
		case strings.HasPrefix("nodes", what) && what != "":
			return c.showNodes(ctx, arg, one)
		case strings.HasPrefix("partitions", what) && len(what) >= 2:
			return c.showPartitions(ctx, arg, one)
		case strings.HasPrefix("reservations", what) && len(what) >= 3:
			return c.showResv(ctx, arg, one) // scontrol_resv.go
		case what == "config":
			return c.showConfig(ctx) // showconfig.go
		case what == "hostnames":
			if arg == "" {
				arg = os.Getenv("SLURM_JOB_NODELIST")
			}
			hs, err := hostlist.Expand(arg)
			if err != nil {
				return invalid("%v", err)
			}
			for _, h := range hs {
				fmt.Fprintln(c.Stdout, h)
			}
			return nil
		case what == "hostlist" || what == "hostlistsorted":
			hs, err := hostlist.Expand(arg)
			if err != nil {
				return invalid("%v", err)
			}
			if what == "hostlistsorted" {
				slices.Sort(hs)
			}
			fmt.Fprintln(c.Stdout, hostlist.Compress(hs))
			return nil
		}
		return invalid("show %s is not supported; use job, node, partition, reservation, config, hostnames or hostlist", what)
	case "hold", "uhold", "release", "requeue", "requeuehold":
		action := map[string]string{"hold": "hold", "uhold": "hold", "release": "release", "requeue": "requeue", "requeuehold": "requeue"}[cmd]
		if len(args) == 0 {
			return invalid("%s needs job ids", cmd)
		}
		sels, err := parseSels(args)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, s := range sels {
			if _, err := cl.RefAction(ctx, s.ref, action, api.JobActionRequest{}); err != nil {
				errs = append(errs, fmt.Errorf("%s job %s: %w", cmd, s.ref, err))
			}
		}
		return errors.Join(errs...)
	case "top":
		return c.top(ctx, args)
	case "suspend", "resume":
		return c.suspend(ctx, cmd, args)
	case "wait_job":
		return c.waitJob(ctx, args)
	case "notify":
		return c.notify(ctx, args) // scontrol_admin.go
	case "listpids":
		return c.listpids(ctx, args) // listpids.go
	case "ping":
		return c.ping(ctx)
	case "token":
		return c.token(ctx, args)
	case "create":
		return c.createResv(ctx, args) // scontrol_resv.go
	case "delete":
		return c.deleteResv(ctx, args)
	case "update":
		if ok, err := c.adminUpdate(ctx, args); ok {
			return err
		}
		return c.update(ctx, args)
	}
	return invalid("unknown command %q; use show, hold, release, requeue, suspend, resume, top, wait_job, notify, listpids, ping, token, update, create or delete", cmd)
}

// oneLine joins a multi-line key=value block into one line (-o).
func oneLine(b []byte) []byte {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return []byte(strings.Join(lines, " ") + "\n")
}

// writeShowRecord prints one node or partition record of scontrol show
// the way Slurm lays it out: each group of key=value fields on its own
// line, continuation lines indented three spaces and a blank line after the
// record, or with -o (one) the whole record on one line. Nodes and
// partitions share it so that the two layouts cannot drift apart.
func (c *Cmd) writeShowRecord(lines [][]string, one bool) {
	var b bytes.Buffer
	for k, l := range lines {
		if k > 0 {
			b.WriteString("   ")
		}
		b.WriteString(strings.Join(l, " "))
		b.WriteByte('\n')
	}
	out := b.Bytes()
	if one {
		out = oneLine(out)
	} else {
		out = append(out, '\n')
	}
	c.Stdout.Write(out)
}

// showJobs is scontrol show job: each job in Slurm's layout (see
// writeJobShow), with detail -d's count.
func (c *Cmd) showJobs(ctx context.Context, arg string, one, json bool, detail int) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	var jobs []spec.Job
	if arg == "" {
		if jobs, err = cl.Jobs(ctx, api.JobFilter{All: true}); err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
	} else {
		for _, a := range splitList(arg) {
			s, err := parseSel(a)
			if err != nil {
				return err
			}
			j, err := cl.JobByRef(ctx, s.ref)
			if err != nil {
				return fmt.Errorf("show job %s: %w", s.ref, err)
			}
			if s.ref.IsTask || j.ArrayJobID != j.ID {
				jobs = append(jobs, j)
				continue
			}
			// A bare array id shows every task, as scontrol does.
			all, err := cl.Jobs(ctx, api.JobFilter{All: true})
			if err != nil {
				return fmt.Errorf("show job %s: %w", s.ref, err)
			}
			for i := range all {
				if all[i].ArrayJobID == j.ID {
					task, err := cl.Job(ctx, all[i].ID)
					if err != nil {
						return fmt.Errorf("show job %d: %w", all[i].ID, err)
					}
					jobs = append(jobs, task)
				}
			}
		}
	}
	if json {
		return format.WriteJobsJSON(c.Stdout, jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(c.Stdout, "No jobs in the system")
		return nil
	}
	for i := range jobs {
		var b bytes.Buffer
		writeJobShow(&b, &jobs[i], c.Now, detail)
		out := b.Bytes()
		if one {
			out = oneLine(out)
		} else {
			out = append(out, '\n')
		}
		if _, err := c.Stdout.Write(out); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cmd) nodes(ctx context.Context) ([]spec.Node, error) {
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	ns, err := cl.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	slices.SortFunc(ns, func(a, b spec.Node) int { return strings.Compare(a.Name, b.Name) })
	return ns, nil
}

func (c *Cmd) showNodes(ctx context.Context, arg string, one bool) error {
	ns, err := c.nodes(ctx)
	if err != nil {
		return err
	}
	want, err := hostlist.Expand(arg)
	if arg != "" && err != nil {
		return invalid("%v", err)
	}
	for i := range ns {
		n := &ns[i]
		if arg != "" && !slices.Contains(want, n.Name) {
			continue
		}
		gres := "(null)"
		if len(n.GPUs) > 0 {
			gres = "gpu:" + orNull(n.GPUs[0].Model) + ":" + strconv.Itoa(len(n.GPUs))
		}
		reason := ""
		if n.Reason != "" {
			reason = "Reason=" + n.Reason
		}
		lines := [][]string{
			{"NodeName=" + n.Name, "Arch=x86_64"},
			{"CPUAlloc=" + strconv.Itoa(n.AllocCPUs), "CPUTot=" + strconv.Itoa(n.CPUs)},
			{"AvailableFeatures=" + orNull(strings.Join(n.Features, ",")), "ActiveFeatures=" + orNull(strings.Join(n.Features, ","))},
			{"Gres=" + gres},
			{"NodeAddr=" + orDefault(n.Addr, n.Name), "NodeHostName=" + n.Name},
			{"RealMemory=" + strconv.FormatInt(n.MemMiB, 10), "AllocMem=" + strconv.FormatInt(n.AllocMemMiB, 10)},
			{"Weight=" + strconv.Itoa(max(n.Weight, 1)), "CachedImages=" + strconv.Itoa(n.CachedImages)},
			{"State=" + nodeStateFlags(n), "Partitions=" + strings.Join(n.Partitions, ",")},
			{"AllocTRES=" + allocTRES(n)},
		}
		if reason != "" {
			lines = append(lines, []string{reason})
		}
		c.writeShowRecord(lines, one)
	}
	return nil
}

func allocTRES(n *spec.Node) string {
	if n.AllocCPUs == 0 && n.AllocMemMiB == 0 && len(n.AllocGPUs) == 0 {
		return ""
	}
	s := fmt.Sprintf("cpu=%d,mem=%s", n.AllocCPUs, format.MiB(n.AllocMemMiB))
	if len(n.AllocGPUs) > 0 {
		s += fmt.Sprintf(",gres/gpu=%d", len(n.AllocGPUs))
	}
	return s
}

func orNull(s string) string { return orDefault(s, "(null)") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// partitionsOfNodes groups nodes by the partitions they list, in name order.
func partitionsOfNodes(ns []spec.Node) ([]string, map[string][]*spec.Node) {
	by := map[string][]*spec.Node{}
	var names []string
	for i := range ns {
		for _, p := range ns[i].Partitions {
			if _, ok := by[p]; !ok {
				names = append(names, p)
			}
			by[p] = append(by[p], &ns[i])
		}
	}
	slices.Sort(names)
	return names, by
}

func (c *Cmd) showPartitions(ctx context.Context, arg string, one bool) error {
	ns, err := c.nodes(ctx)
	if err != nil {
		return err
	}
	parts, err := c.partitions(ctx, ns)
	if err != nil {
		return err
	}
	cpusOf := map[string]int{}
	for _, n := range ns {
		cpusOf[n.Name] = n.CPUs
	}
	for _, p := range parts {
		if arg != "" && p.Name != arg {
			continue
		}
		cpus := 0
		for _, h := range p.Nodes {
			cpus += cpusOf[h]
		}
		def := "NO"
		if p.Default {
			def = "YES"
		}
		defTime := "NONE"
		if p.DefaultTime != 0 {
			defTime = timeLimit(p.DefaultTime)
		}
		lines := [][]string{
			{"PartitionName=" + p.Name},
			{"AllowGroups=ALL", "AllowAccounts=ALL", "AllowQos=ALL"},
			{"Default=" + def, "DefaultTime=" + defTime, "MaxTime=" + strings.ToUpper(timeLimit(p.MaxTime))},
			{"Nodes=" + orNull(hostlist.Compress(p.Nodes))},
			{"State=" + orDefault(strings.ToUpper(p.State), "UP"), "TotalCPUs=" + strconv.Itoa(cpus), "TotalNodes=" + strconv.Itoa(len(p.Nodes))},
		}
		c.writeShowRecord(lines, one)
	}
	return nil
}

// update is scontrol update JobId=N Key=Value...: TimeLimit, Partition,
// QOS, Nice, JobName and Comment, as the controller's policy allows.
func (c *Cmd) update(ctx context.Context, args []string) error {
	var (
		ids []string
		req api.JobUpdateRequest
		n   int
	)
	for _, w := range args {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return invalid("update: %q is not Key=Value; e.g. scontrol update JobId=42 TimeLimit=1:00:00", w)
		}
		v2 := v
		switch strings.ToLower(k) {
		case "jobid", "job":
			ids = append(ids, splitList(v)...)
			continue
		case "timelimit":
			d, err := directive.ParseTime(v)
			if err != nil {
				return invalid("update: TimeLimit: %v", err)
			}
			if d == directive.Unlimited {
				return invalid("update: TimeLimit=%s: give a limit; gpud does not lift one", v)
			}
			sd := spec.Duration(d)
			req.TimeLimit = &sd
		case "partition":
			req.Partition = &v2
		case "qos":
			req.QOS = &v2
		case "nice":
			x, err := strconv.Atoi(v)
			if err != nil {
				return invalid("update: Nice=%q is not a whole number", v)
			}
			req.Nice = &x
		case "jobname", "name":
			req.Name = &v2
		case "comment":
			req.Comment = &v2
		default:
			return invalid("update: %s cannot be changed by gpud; it changes TimeLimit, Partition, QOS, Nice, JobName and Comment", k)
		}
		n++
	}
	if len(ids) == 0 {
		return invalid("update needs JobId=N; e.g. scontrol update JobId=42 TimeLimit=30:00")
	}
	if n == 0 {
		return invalid("update JobId=%s: nothing to change; give TimeLimit=, Partition=, QOS=, Nice=, JobName= or Comment=", strings.Join(ids, ","))
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		s, err := parseSel(id)
		if err != nil {
			return err
		}
		if _, err := cl.UpdateJob(ctx, s.ref, req); err != nil {
			errs = append(errs, fmt.Errorf("update job %s: %w", s.ref, err))
		}
	}
	return errors.Join(errs...)
}

// token is scontrol token [lifespan=SECONDS] [username=NAME]: a token for
// Slurm's REST API (X-SLURM-USER-TOKEN), printed as SLURM_JWT=... so that
// export $(scontrol token) works as with Slurm. It is gpud's own token,
// for the caller only.
func (c *Cmd) token(ctx context.Context, args []string) error {
	var life time.Duration
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch strings.ToLower(k) {
		case "lifespan":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return invalid("lifespan=%q: give seconds > 0", v)
			}
			life = time.Duration(n) * time.Second
		case "username":
			if u, err := user.Current(); err != nil || u.Username != v {
				return invalid("username=%s: gpud issues a token for you only; an admin issues other users' with gpud token issue --user on the controller host", v)
			}
		default:
			return invalid("token takes lifespan=SECONDS (and username= yourself), not %q", a)
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	tok, err := cl.UserToken(ctx, life)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "SLURM_JWT=%s\n", tok.Token)
	return nil
}

// nodeStateFlags is scontrol show node's State=: the state and, as Slurm
// prints them, its power-saving flags (IDLE+POWERED_DOWN).
func nodeStateFlags(n *spec.Node) string {
	if n.Power == spec.PowerOn {
		return string(n.State)
	}
	return string(n.State) + "+" + string(n.Power)
}
