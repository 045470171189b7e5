package sched

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// reasonNamed is the NodeReason of the filter called name.
func reasonNamed(t *testing.T, name string) NodeReason {
	t.Helper()
	for r := NodeReason(1); int(r) < numNodeReasons; r++ {
		if r.filterOf().name == name {
			return r
		}
	}
	t.Fatalf("no filter is called %q", name)
	return NodeFits
}

// TestFilters: for each filter of the pipeline, a node and a job that
// this filter, and none before it, turns down; the reason counted is the
// filter's, in its words. Every filter has a case.
func TestFilters(t *testing.T) {
	t.Parallel()
	withState := func(s spec.NodeState) func(*Node) { return func(n *Node) { n.State = s } }
	cases := []struct {
		filter string
		node   func(*Node)
		job    func(*Job)
		work   func(*workNode) // the cycle's view, after newCycle
		want   string
	}{
		{filter: "down", node: withState(spec.NodeDown), want: "down"},
		{filter: "drain", node: withState(spec.NodeDrain), want: "drain"},
		{filter: "draining", node: withState(spec.NodeDraining), want: "draining"},
		{filter: "unknown", node: withState(spec.NodeUnknown), want: "unknown"},
		{filter: "power", node: func(n *Node) { n.Power = spec.PoweredDown }, want: "powered down"},
		{filter: "power", node: func(n *Node) { n.Power = spec.PoweringUp }, want: "powered down"},
		{filter: "partition", job: func(j *Job) { j.Partition = "debug" }, want: "not in partition debug"},
		{filter: "nodelist", job: func(j *Job) { j.Req.NodeList = []string{"other"} }, want: "not in the requested node list"},
		{filter: "reservation nodes", job: func(j *Job) { j.Reservation = "class" }, want: "not in reservation class"},
		{filter: "exclude", job: func(j *Job) { j.Req.Exclude = []string{"n"} }, want: "excluded"},
		{filter: "constraint", job: func(j *Job) { j.Req.Constraint = "ib&nvme" }, node: func(n *Node) { n.Features = []string{"ib"} },
			want: "constraint ib&nvme"},
		{filter: "rdma", job: func(j *Job) { j.Req.RDMA = 2 }, node: func(n *Node) { n.NICs = []NIC{{Name: "mlx5_0"}} }, want: "too few RDMA NICs"},
		{filter: "mig", job: func(j *Job) { j.Req.GPUProfile = "3g.40gb" }, want: "no room for a 3g.40gb MIG job"},
		{filter: "cpus", job: func(j *Job) { j.Req.CPUsPerNode = 65 }, want: "too few CPUs"},
		{filter: "memory", job: func(j *Job) { j.Req.MemMiB = 1 << 20 }, want: "too little memory"},
		{filter: "gpus", job: func(j *Job) { j.Req.GPUsPerNode, j.Req.GPUModel = 9, "h100" }, want: "too few h100 GPUs"},
		{filter: "gpus", job: func(j *Job) { j.Req.GPUsPerNode, j.Req.GPUModel, j.Req.GPUFraction = 0, "a100", 0.5 }, want: "too few a100 GPUs"},
		{filter: "free GPUs", node: func(n *Node) {
			for k := range 6 {
				n.GPUs[k].Free = false
			}
		}, job: func(j *Job) { j.Req.GPUsPerNode = 4 }, want: "insufficient free GPUs"},
		{filter: "shared GPU", node: func(n *Node) {
			for k := range n.GPUs {
				n.GPUs[k].Free, n.GPUs[k].FreeFraction = false, 0.25
			}
		}, job: func(j *Job) { j.Req.GPUsPerNode, j.Req.GPUFraction = 0, 0.5 }, want: "no shared GPUs with 0.5 free"},
		{filter: "free CPUs", node: func(n *Node) { n.FreeCPUs = 2 }, job: func(j *Job) { j.Req.CPUsPerNode = 4 }, want: "insufficient free CPUs"},
		{filter: "free memory", node: func(n *Node) { n.FreeMemMiB = 100 }, job: func(j *Job) { j.Req.MemMiB = 200 }, want: "insufficient free memory"},
		{filter: "exclusive", node: func(n *Node) { n.Allocs = 1 }, job: func(j *Job) { j.Req.Exclusive = true }, want: "in use (the job is exclusive)"},
		{filter: "reservation", work: func(w *workNode) { w.reserved = true }, want: "held for a reservation"},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.filter+"/"+tc.want, func(t *testing.T) {
			n := node("n", 64, 1000, "h100", 8)
			if tc.node != nil {
				tc.node(&n)
			}
			j := job(1, 1, 1)
			if tc.job != nil {
				tc.job(&j)
			}
			c := newCycle(&Snapshot{Nodes: []Node{n}}, t0, Config{})
			w := c.nodes[0]
			if tc.work != nil {
				tc.work(w)
			}
			want := reasonNamed(t, tc.filter)
			if got := nodeReason(w, &j); got != want {
				t.Errorf("nodeReason = %d (%s), want %d (%s)", got, got.text(&j), want, tc.filter)
			}
			if got := want.text(&j); got != tc.want {
				t.Errorf("reason %q, want %q", got, tc.want)
			}
		})
		covered[tc.filter] = true
	}
	for r := NodeReason(1); int(r) < numNodeReasons; r++ {
		if !covered[r.filterOf().name] {
			t.Errorf("filter %q has no case", r.filterOf().name)
		}
	}
	// The node that passes every filter fits now.
	c := newCycle(&Snapshot{Nodes: []Node{node("n", 64, 1000, "h100", 8)}}, t0, Config{})
	if j := job(1, 1, 1); nodeReason(c.nodes[0], &j) != NodeFits || NodeFits.text(&j) != "fits now" {
		t.Errorf("a node that holds the job: %s", nodeReason(c.nodes[0], &j).text(&j))
	}
}

// TestFilterList: names are unique, every filter has its words and a
// predicate, and schedulable is exactly the four state filters.
func TestFilterList(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for r := NodeReason(1); int(r) < numNodeReasons; r++ {
		f := r.filterOf()
		if f.name == "" || f.when == "" || f.reason == nil || f.rejects == nil {
			t.Errorf("filter %d (%q) lacks a name, its when, reason or predicate", r, f.name)
		}
		if seen[f.name] {
			t.Errorf("two filters are called %q", f.name)
		}
		seen[f.name] = true
	}
	for _, s := range []spec.NodeState{spec.NodeIdle, spec.NodeMixed, spec.NodeAllocated, spec.NodeDown, spec.NodeDrain, spec.NodeDraining, spec.NodeUnknown} {
		n := node("n", 8, 1000, "", 0)
		n.State = s
		c := newCycle(&Snapshot{Nodes: []Node{n}}, t0, Config{})
		j := job(1, 1, 0)
		r := filter(c.nodes[0], &j)
		stateFilter := r != NodeFits && r <= reasonNamed(t, "unknown")
		if schedulable(s) == stateFilter {
			t.Errorf("state %s: schedulable %v, but the state filters say %s", s, schedulable(s), r.text(&j))
		}
	}
}

var update = flag.Bool("update", false, "rewrite the docs' filter tables from the filter list")

// filterTable is the pipeline as a Markdown table, for the docs.
func filterTable() string {
	eg := &Job{Partition: "P", Req: spec.Resources{GPUModel: "h100", Constraint: "ib", GPUProfile: "3g.40gb", GPUFraction: 0.5}}
	var b strings.Builder
	b.WriteString("| # | filter | kind | turns a node down when | reason counted (for a job asking for h100 GPUs, -p P, --constraint ib, a 3g.40gb slice or 0.5 of a GPU) |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for r := NodeReason(1); int(r) < numNodeReasons; r++ {
		f := r.filterOf()
		kind := "static"
		if int(r) > len(staticFilters) {
			kind = "dynamic"
		}
		if f.wholeGPUs {
			kind += " (whole GPUs)"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", r, f.name, kind, f.when, f.reason(eg))
	}
	b.WriteString("| | (passes) | | every filter passes: the partition's placement scores the node | fits now |\n")
	return b.String()
}

const (
	tableBegin = "<!-- filter table: from gpud/sched/filters.go; `go test ./gpud/sched -run TestFilterDocs -update` rewrites it -->\n"
	tableEnd   = "<!-- end of filter table -->"
)

// TestFilterDocs fails when a doc's filter table differs from the list.
func TestFilterDocs(t *testing.T) {
	want := filterTable()
	for _, path := range []string{"../../docs/architecture.md", "README.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		i := strings.Index(doc, tableBegin)
		k := strings.Index(doc, tableEnd)
		if i < 0 || k < i {
			t.Errorf("%s has no filter table between %q and %q", path, strings.TrimSpace(tableBegin), tableEnd)
			continue
		}
		got := doc[i+len(tableBegin) : k]
		if got == want {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(doc[:i+len(tableBegin)]+want+doc[k:]), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote the filter table of %s", path)
			continue
		}
		t.Errorf("%s: the filter table differs from the filters (run go test ./gpud/sched -run TestFilterDocs -update):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
