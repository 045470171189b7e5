package slurm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

var sinfoSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "noheader", Short: 'h'},
	{Long: "format", Short: 'o', Arg: getopt.Required},
	{Long: "Node", Short: 'N'},
	{Long: "long", Short: 'l'},
	{Long: "partition", Short: 'p', Arg: getopt.Required},
	{Long: "nodes", Short: 'n', Arg: getopt.Required},
	{Long: "summarize", Short: 's'},
	{Long: "json"},
	{Long: "all", Short: 'a'},
	{Long: "exact", Short: 'e'},
	{Long: "reservation", Short: 'T'},
}, common...)}

// sinfo's default formats (man sinfo).
const (
	sinfoDefault  = "%9P %.5a %.10l %.6D %.6t %N"
	sinfoLong     = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
	sinfoNode     = "%10N %.6D %9P %6t"
	sinfoNodeLong = "%10N %.6D %9P %11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"
	sinfoSummary  = "%9P %.5a %.10l %.16F  %N" // -s: one line per partition
)

// sinfoKey groups a partition's nodes into rows: by state, and with -e
// by size too; -s leaves it empty (one row per partition).
type sinfoKey struct {
	state spec.NodeState
	power spec.PowerState
	cpus  int
	mem   int64
	gres  string
}

// sinfoRow is one line: a partition's nodes in one state (or one node).
type sinfoRow struct {
	part  *api.Partition
	state spec.NodeState
	// power adds Slurm's suffix to the state ("idle~").
	power spec.PowerState
	nodes []*spec.Node
}

var shortNodeState = map[spec.NodeState]string{
	spec.NodeIdle: "idle", spec.NodeMixed: "mix", spec.NodeAllocated: "alloc", spec.NodeDown: "down",
	spec.NodeDrain: "drain", spec.NodeDraining: "drng", spec.NodeUnknown: "unk",
	spec.NodeFail: "fail", spec.NodeFailing: "failg",
}

func (c *Cmd) sinfo(ctx context.Context) error {
	ps, rest, err := c.parse(sinfoSet)
	if done, err := c.handled(err, "[-h] [-N] [-l] [-s] [-e] [-o FORMAT] [-p PARTS] [-n NODES] [-T] [--json]"); done || err != nil {
		return err
	}
	if len(rest) > 0 {
		return invalid("unrecognized argument %q", rest[0])
	}
	if getopt.Has(ps, "reservation") {
		return c.sinfoResv(ctx) // scontrol_resv.go
	}
	ns, err := c.nodes(ctx)
	if err != nil {
		return err
	}
	if getopt.Has(ps, "json") {
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": ns})
	}
	wantParts := splitList(getopt.All(ps, "partition")...)
	wantNodes := splitList(getopt.All(ps, "nodes")...)
	byNode := getopt.Has(ps, "Node")
	f := sinfoDefault
	switch {
	case byNode && getopt.Has(ps, "long"):
		f = sinfoNodeLong
	case byNode:
		f = sinfoNode
	case getopt.Has(ps, "summarize"):
		f = sinfoSummary
	case getopt.Has(ps, "long"):
		f = sinfoLong
	}
	// -s sums each partition's nodes on one line, whatever their state
	// (NODES(A/I/O/T) counts them); -e splits a state's nodes further by
	// size, so that %c %m %G describe every node of a row.
	summarize := getopt.Has(ps, "summarize") && !byNode
	exact := getopt.Has(ps, "exact")
	if v, ok := getopt.Last(ps, "format"); ok {
		f = v
	}
	parts, err := c.partitions(ctx, ns)
	if err != nil {
		return err
	}
	byName := map[string]*spec.Node{}
	for i := range ns {
		byName[ns[i].Name] = &ns[i]
	}
	var rows []sinfoRow
	for i := range parts {
		p := &parts[i]
		if len(wantParts) > 0 && !contains(wantParts, p.Name) {
			continue
		}
		var order []sinfoKey
		groups := map[sinfoKey][]*spec.Node{}
		for _, name := range p.Nodes {
			n := byName[name]
			if n == nil {
				continue
			}
			if len(wantNodes) > 0 && !contains(wantNodes, n.Name) {
				continue
			}
			if byNode {
				rows = append(rows, sinfoRow{part: p, state: n.State, power: n.Power, nodes: []*spec.Node{n}})
				continue
			}
			var k sinfoKey
			switch {
			case summarize:
			case exact:
				k = sinfoKey{state: n.State, power: n.Power, cpus: n.CPUs, mem: n.MemMiB, gres: nodeGres(n)}
			default:
				k = sinfoKey{state: n.State, power: n.Power}
			}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], n)
		}
		for _, k := range order {
			rows = append(rows, sinfoRow{part: p, state: k.state, power: k.power, nodes: groups[k]})
		}
		if len(p.Nodes) == 0 && !byNode {
			rows = append(rows, sinfoRow{part: p, state: "n/a"})
		}
	}
	fields, err := parseSinfoFormat(f)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(c.Stdout)
	if getopt.Has(ps, "long") && !getopt.Has(ps, "noheader") {
		w.WriteString(c.Now.Format(longDate) + "\n") // sinfo -l starts with the time
	}
	if !getopt.Has(ps, "noheader") {
		var b strings.Builder
		for _, fl := range fields {
			b.WriteString(fl.Lit)
			if fl.Verb != 0 {
				b.WriteString(padTo(sinfoHeader[fl.Verb], fl.Width, fl.Right))
			}
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	for _, r := range rows {
		var b strings.Builder
		for _, fl := range fields {
			b.WriteString(fl.Lit)
			if fl.Verb != 0 {
				b.WriteString(padTo(sinfoValue(r, fl.Verb), fl.Width, fl.Right))
			}
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	return w.Flush()
}

// partAvail is sinfo's AVAIL: up, down, drain or inact.
func partAvail(state string) string {
	switch strings.ToUpper(state) {
	case "", "UP":
		return "up"
	case "INACTIVE":
		return "inact"
	}
	return strings.ToLower(state)
}

// timeLimit writes a partition limit as sinfo does: infinite, M:SS,
// H:MM:SS or D-HH:MM:SS.
func timeLimit(d spec.Duration) string {
	if d == 0 {
		return "infinite"
	}
	return string(format.AppendElapsed(nil, d.Std()))
}

// partitions returns the controller's partitions; an older controller
// without GET /v1/partitions gets them derived from the nodes.
func (c *Cmd) partitions(ctx context.Context, ns []spec.Node) ([]api.Partition, error) {
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	ps, err := cl.Partitions(ctx)
	if err == nil {
		return ps, nil
	}
	if spec.KindOf(err) != spec.ErrNotFound {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	names, by := partitionsOfNodes(ns)
	for _, n := range names {
		p := api.Partition{Name: n, State: "UP"}
		for _, node := range by[n] {
			p.Nodes = append(p.Nodes, node.Name)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var sinfoHeader = map[byte]string{
	'P': "PARTITION", 'R': "PARTITION", 'a': "AVAIL", 'l': "TIMELIMIT", 'D': "NODES", 't': "STATE", 'T': "STATE",
	'N': "NODELIST", 'n': "HOSTNAMES", 'G': "GRES", 'c': "CPUS", 'm': "MEMORY", 'f': "AVAIL_FEATURES",
	'E': "REASON", 's': "JOB_SIZE", 'r': "ROOT", 'h': "OVERSUBSCRIBE", 'g': "GROUPS", 'z': "S:C:T",
	'd': "TMP_DISK", 'w': "WEIGHT", 'C': "CPUS(A/I/O/T)", 'F': "NODES(A/I/O/T)", 'O': "CPU_LOAD", 'e': "FREE_MEM",
}

func sinfoValue(r sinfoRow, verb byte) string {
	n0 := &spec.Node{}
	if len(r.nodes) > 0 {
		n0 = r.nodes[0]
	}
	switch verb {
	case 'P':
		if r.part.Default {
			return r.part.Name + "*"
		}
		return r.part.Name
	case 'R':
		return r.part.Name
	case 'a':
		return partAvail(r.part.State)
	case 'l':
		return timeLimit(r.part.MaxTime)
	case 'D':
		return strconv.Itoa(len(r.nodes))
	case 't':
		if s, ok := shortNodeState[r.state]; ok {
			return s + r.power.Suffix()
		}
		return string(r.state) + r.power.Suffix()
	case 'T':
		return strings.ToLower(string(r.state)) + r.power.Suffix()
	case 'N', 'n':
		var hs []string
		for _, n := range r.nodes {
			hs = append(hs, n.Name)
		}
		if verb == 'n' {
			return strings.Join(hs, ",")
		}
		return hostlist.Compress(hs)
	case 'G':
		return nodeGres(n0)
	case 'c', 'm':
		// Slurm's: the smallest of the row's nodes, with a '+' when
		// they differ (250+); sinfo -e rows are all one size.
		var lo, hi int64
		for i, n := range r.nodes {
			v := int64(n.CPUs)
			if verb == 'm' {
				v = n.MemMiB
			}
			if i == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
		}
		if len(r.nodes) == 0 {
			lo, hi = int64(n0.CPUs), int64(n0.CPUs)
			if verb == 'm' {
				lo, hi = n0.MemMiB, n0.MemMiB
			}
		}
		if hi > lo {
			return strconv.FormatInt(lo, 10) + "+"
		}
		return strconv.FormatInt(lo, 10)
	case 'F':
		var a, i, o int
		for _, n := range r.nodes {
			switch n.State {
			case spec.NodeAllocated, spec.NodeMixed:
				a++
			case spec.NodeIdle:
				i++
			default: // down, drained, draining, unknown: Slurm's "other"
				o++
			}
		}
		return fmt.Sprintf("%d/%d/%d/%d", a, i, o, len(r.nodes))
	case 'f':
		return orNull(strings.Join(n0.Features, ","))
	case 'E':
		return orDefault(n0.Reason, "none")
	case 'C':
		a, t := 0, 0
		for _, n := range r.nodes {
			a += n.AllocCPUs
			t += n.CPUs
		}
		return strconv.Itoa(a) + "/" + strconv.Itoa(t-a) + "/0/" + strconv.Itoa(t)
	case 's':
		return "1-infinite"
	case 'r':
		return "no"
	case 'h':
		return "NO"
	case 'g':
		return "all"
	case 'z', 'd', 'w', 'O', 'e':
		return "N/A"
	}
	return ""
}

// nodeGres is sinfo's %G for one node: gpu:MODEL:COUNT, or (null).
func nodeGres(n *spec.Node) string {
	if len(n.GPUs) == 0 {
		return "(null)"
	}
	return "gpu:" + orDefault(n.GPUs[0].Model, "gpu") + ":" + strconv.Itoa(len(n.GPUs))
}

func parseSinfoFormat(s string) ([]format.Field, error) {
	fields, ferr := format.ParseFields(s, func(c byte) bool { _, ok := sinfoHeader[c]; return ok })
	switch {
	case ferr == nil:
		return fields, nil
	case ferr.Digits != "":
		return nil, invalid("--format %q: field width %s is too wide; give at most 4 digits", s, ferr.Digits)
	case ferr.End:
		return nil, invalid("--format %q ends inside a field", s)
	}
	return nil, invalid("--format: field %%%c is not supported; gpud has %%P %%R %%a %%l %%D %%t %%T %%N %%n %%G %%c %%m %%f %%E %%C %%F", ferr.Letter)
}

// padTo pads v to width like Slurm's formats: cut when longer, right-
// justified with '.'.
func padTo(v string, width int, right bool) string {
	if width == 0 {
		return v
	}
	if len(v) > width {
		v = v[:width]
	}
	sp := strings.Repeat(" ", width-len(v))
	if right {
		return sp + v
	}
	return v + sp
}
