package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/slurmtime"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

// Advance reservations: scontrol create, update, delete and show
// reservation, and sinfo -T, in Slurm's words and layouts.

// resvKeys are the keys scontrol create and update reservation take.
const resvKeys = "ReservationName, StartTime, EndTime, Duration, Nodes, NodeCnt, TRES (gres/gpu=N, node=N), PartitionName, Users, Groups, Accounts, Flags (Flags+=, Flags-=)"

// parseResv reads scontrol's Key=Value words for a reservation.
func (c *Cmd) parseResv(args []string) (spec.ReservationUpdate, error) {
	var u spec.ReservationUpdate
	var problems []error
	for _, w := range args {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			problems = append(problems, invalid("%q is not Key=Value; e.g. scontrol create reservation StartTime=now Duration=60 Nodes=gpu-[01-02] Users=root Flags=MAINT", w))
			continue
		}
		op := ""
		if strings.HasSuffix(k, "+") || strings.HasSuffix(k, "-") {
			k, op = k[:len(k)-1], k[len(k)-1:]
		}
		switch key := strings.ToLower(k); key {
		case "reservationname", "reservation", "resvname":
			u.Name = v
		case "starttime":
			t, err := slurmtime.Parse(v, c.Now, slurmtime.Future)
			if err != nil {
				problems = append(problems, invalid("StartTime=%s: %v", v, err))
				continue
			}
			st := spec.NewTime(t)
			u.StartTime = &st
		case "endtime":
			t, err := slurmtime.Parse(v, c.Now, slurmtime.Future)
			if err != nil {
				problems = append(problems, invalid("EndTime=%s: %v", v, err))
				continue
			}
			et := spec.NewTime(t)
			u.EndTime = &et
		case "duration":
			d, err := directive.ParseTime(v)
			if err == nil && d <= 0 {
				err = errors.New("a reservation needs a length; give minutes or D-HH:MM:SS")
			}
			if err != nil {
				problems = append(problems, invalid("Duration=%s: %v", v, err))
				continue
			}
			sd := spec.Duration(d)
			u.Duration = &sd
		case "nodes", "nodelist":
			ns := []string{"ALL"}
			if !strings.EqualFold(v, "ALL") {
				hs, err := hostlist.Expand(v)
				if err != nil {
					problems = append(problems, invalid("Nodes=%s: %v", v, err))
					continue
				}
				ns = hs
			}
			u.Nodes = &ns
		case "nodecnt", "nodecount":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				problems = append(problems, invalid("NodeCnt=%s: give a positive number of nodes", v))
				continue
			}
			u.NodeCount = &n
		case "tres":
			if err := parseResvTRES(v, &u); err != nil {
				problems = append(problems, err)
				continue
			}
		case "partitionname", "partition":
			p := v
			u.Partition = &p
		case "users", "user":
			us := splitList(v)
			u.Users = &us
		case "accounts", "account":
			as := splitList(v)
			u.Accounts = &as
		case "groups", "group":
			gs := splitList(v)
			u.Groups = &gs
		case "flags", "flag":
			fs := splitList(v)
			switch op {
			case "+":
				u.FlagsAdd = append(u.FlagsAdd, fs...)
			case "-":
				u.FlagsRemove = append(u.FlagsRemove, fs...)
			default:
				u.Flags = &fs
			}
			continue
		default:
			problems = append(problems, invalid("reservation: %s is not something gpud's reservations have; use %s", k, resvKeys))
			continue
		}
		if op != "" {
			problems = append(problems, invalid("%s%s=: only Flags takes += and -=", k, op))
		}
	}
	return u, errors.Join(problems...)
}

// parseResvTRES reads TRES=: gres/gpu=N or gres/gpu:MODEL=N (a
// GPU-count reservation) and node=N (NodeCnt), comma-separated, as
// Slurm writes them; the other TRES (cpu, license, bb) are refused.
func parseResvTRES(v string, u *spec.ReservationUpdate) error {
	var problems []error
	for item := range strings.SplitSeq(v, ",") {
		k, n, ok := strings.Cut(strings.TrimSpace(item), "=")
		count, err := strconv.Atoi(n)
		if !ok || err != nil || count < 0 {
			problems = append(problems, invalid("TRES=%s: %q is not TYPE=COUNT; e.g. TRES=gres/gpu=16 or TRES=gres/gpu:h100=8,node=2", v, item))
			continue
		}
		switch key := strings.ToLower(k); {
		case key == "gres/gpu":
			u.GPUs = &count
		case strings.HasPrefix(key, "gres/gpu:"):
			model := k[len("gres/gpu:"):]
			u.GPUs, u.GPUModel = &count, &model
		case key == "node":
			u.NodeCount = &count
		default:
			problems = append(problems, invalid("TRES=%s: gpud reserves GPUs (gres/gpu=N, gres/gpu:MODEL=N) or whole nodes (node=N), not %s", v, k))
		}
	}
	return errors.Join(problems...)
}

// createResv is scontrol create reservation KEY=VALUE...
func (c *Cmd) createResv(ctx context.Context, args []string) error {
	if len(args) > 0 && strings.HasPrefix("reservation", strings.ToLower(args[0])) && !strings.Contains(args[0], "=") {
		args = args[1:]
	}
	u, err := c.parseResv(args)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	name, err := cl.CreateReservation(ctx, u)
	if err != nil {
		return fmt.Errorf("Error creating the reservation: %w", err)
	}
	fmt.Fprintf(c.Stdout, "Reservation created: %s\n", name)
	return nil
}

// updateResv is scontrol update ReservationName=NAME KEY=VALUE...
func (c *Cmd) updateResv(ctx context.Context, args []string) error {
	u, err := c.parseResv(args)
	if err != nil {
		return err
	}
	if u.Name == "" {
		return invalid("update: give ReservationName=NAME")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := cl.UpdateReservation(ctx, u); err != nil {
		return fmt.Errorf("Error updating the reservation: %w", err)
	}
	fmt.Fprintln(c.Stdout, "Reservation updated.")
	return nil
}

// deleteResv is scontrol delete ReservationName=NAME (or delete
// reservation NAME).
func (c *Cmd) deleteResv(ctx context.Context, args []string) error {
	var names []string
	for i := 0; i < len(args); i++ {
		k, v, ok := strings.Cut(args[i], "=")
		switch {
		case ok && (strings.EqualFold(k, "ReservationName") || strings.EqualFold(k, "Reservation")):
			names = append(names, v)
		case !ok && strings.EqualFold(k, "reservation") && i+1 < len(args):
			names = append(names, args[i+1])
			i++
		default:
			return invalid("delete: %q: use scontrol delete ReservationName=NAME", args[i])
		}
	}
	if len(names) == 0 {
		return invalid("delete: give ReservationName=NAME")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if err := cl.DeleteReservation(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("Error deleting the reservation %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// reservations lists them with the nodes' CPUs and GPUs (for CoreCnt
// and TRES).
func (c *Cmd) reservations(ctx context.Context) ([]api.Reservation, map[string]spec.Node, error) {
	cl, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	rs, err := cl.Reservations(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list reservations: %w", err)
	}
	byName := map[string]spec.Node{}
	if len(rs.Reservations) > 0 {
		ns, err := c.nodes(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range ns {
			byName[n.Name] = n
		}
	}
	return rs.Reservations, byName, nil
}

// resvTime is a window edge in Slurm's layout, local time.
func resvTime(t spec.Time) string {
	if t.IsZero() {
		return "Unknown"
	}
	return t.Local().Format(format.TimeLayout)
}

func resvDuration(r *api.Reservation) string {
	d := r.EndTime.Sub(r.StartTime.Time)
	if !r.WindowStart.IsZero() {
		d = r.WindowEnd.Sub(r.WindowStart.Time)
	}
	return format.AcctDuration(int64(d / time.Second)) // Slurm's 01:00:00, 1-00:00:00
}

// showResv is scontrol show reservation [NAME], laid out as Slurm's.
func (c *Cmd) showResv(ctx context.Context, name string, one bool) error {
	rs, nodes, err := c.reservations(ctx)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		fmt.Fprintln(c.Stdout, "No reservations in the system")
		return nil
	}
	shown := 0
	for i := range rs {
		r := &rs[i]
		if name != "" && r.Name != name {
			continue
		}
		shown++
		cpus, gpus := 0, 0
		for _, n := range r.Nodes {
			cpus += nodes[n].CPUs
			gpus += len(nodes[n].GPUs)
		}
		tres := "cpu=" + strconv.Itoa(cpus)
		if gpus > 0 {
			tres += ",gres/gpu=" + strconv.Itoa(gpus)
		}
		// A GPU-count reservation holds GPUs alone: no cores, and which
		// GPUs of each node on a line of its own where Slurm shows a core
		// reservation's CoreIDs.
		var perNode [][]string
		if r.GPUs > 0 {
			cpus, tres = 0, "gres/gpu="+strconv.Itoa(r.GPUs)
			if r.GPUModel != "" {
				tres += ",gres/gpu:" + r.GPUModel + "=" + strconv.Itoa(r.GPUs)
			}
			for _, n := range r.Nodes {
				perNode = append(perNode, []string{"  NodeName=" + n, "GPUIDs=" + indexRanges(r.NodeGPUs[n])})
			}
		}
		start, end := r.WindowStart, r.WindowEnd
		if start.IsZero() {
			start, end = r.StartTime, r.EndTime
		}
		lines := [][]string{
			{"ReservationName=" + r.Name, "StartTime=" + resvTime(start), "EndTime=" + resvTime(end), "Duration=" + resvDuration(r)},
			{"Nodes=" + orNull(hostlist.Compress(r.Nodes)), "NodeCnt=" + strconv.Itoa(len(r.Nodes)), "CoreCnt=" + strconv.Itoa(cpus),
				"Features=(null)", "PartitionName=" + orNull(r.Partition), "Flags=" + strings.Join(r.Flags, ",")},
		}
		lines = append(lines, perNode...)
		c.writeShowRecord(append(lines, [][]string{
			{"TRES=" + tres},
			{"Users=" + orNull(strings.Join(r.Users, ",")), "Groups=" + orNull(strings.Join(r.Groups, ",")), "Accounts=" + orNull(strings.Join(r.Accounts, ",")),
				"Licenses=(null)", "State=" + r.State, "BurstBuffer=(null)", "Watts=n/a"},
			{"MaxStartDelay=(null)"},
		}...), one)
	}
	if shown == 0 {
		return spec.Errorf(spec.ErrNotFound, "Reservation %s not found", name)
	}
	return nil
}

// sinfoResv is sinfo -T (--reservation): one line per reservation.
func (c *Cmd) sinfoResv(ctx context.Context) error {
	rs, _, err := c.reservations(ctx)
	if err != nil {
		return err
	}
	rows := [][]string{{"RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION", "NODELIST"}}
	for i := range rs {
		r := &rs[i]
		start, end := r.WindowStart, r.WindowEnd
		if start.IsZero() {
			start, end = r.StartTime, r.EndTime
		}
		rows = append(rows, []string{r.Name, r.State, resvTime(start), resvTime(end), resvDuration(r), hostlist.Compress(r.Nodes)})
	}
	// Slurm's widths: names left, the rest right-aligned to their header.
	widths := []int{9, 8, 19, 19, 11, 0}
	for _, row := range rows {
		widths[0] = max(widths[0], len(row[0]))
	}
	for _, row := range rows {
		var b strings.Builder
		for k, v := range row {
			if k > 0 {
				b.WriteByte(' ')
			}
			switch {
			case k == 0:
				b.WriteString(padTo(v, widths[k], false))
			case k == len(row)-1:
				b.WriteString(v)
			default:
				b.WriteString(padTo(v, widths[k], true))
			}
		}
		fmt.Fprintln(c.Stdout, strings.TrimRight(b.String(), " "))
	}
	return nil
}

// indexRanges writes GPU indexes as Slurm writes ID lists: 0-3,6.
func indexRanges(ks []int) string {
	var b strings.Builder
	for i := 0; i < len(ks); {
		j := i
		for j+1 < len(ks) && ks[j+1] == ks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ks[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ks[j]))
		}
		i = j + 1
	}
	return b.String()
}
