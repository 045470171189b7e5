package step

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

var resAlloc = []spec.NodeAlloc{
	{Node: "a", Rank: 0, CPUs: 4, GPUs: []string{"g1", "g2"}},
	{Node: "b", Rank: 1, CPUs: 4, GPUs: []string{"g3", "g4"}},
}

func mustLayout(t *testing.T, req api.StepRequest) layout {
	t.Helper()
	l, err := stepLayout(resAlloc, req)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestStepLedger: steps book CPUs and GPUs of the allocation as Slurm's
// (≥ 21.08): a default step takes its nodes whole, so a second one waits;
// --exact/-c/--exclusive steps take what their tasks ask and run side by
// side until the node is full; GPUs asked are distinct; --overlap takes
// nothing and is never held back; what a step gives back wakes waiters.
func TestStepLedger(t *testing.T) {
	g := newStepLedger()
	whole := api.StepRequest{}
	lw := mustLayout(t, whole)
	gw, ok := g.take(whole, lw)
	if !ok || !slices.Equal(gw.cpus, []int{4, 4}) || !slices.Equal(gw.gpus[0], []int{0, 1}) {
		t.Fatalf("default step: %v %+v, want all 4 CPUs and both GPUs of each node", ok, gw)
	}
	exact := api.StepRequest{NTasks: 1, CPUsPerTask: 2, GPUsPerTask: 1}
	le := mustLayout(t, exact)
	if _, ok := g.take(exact, le); ok {
		t.Fatal("a step fitted while a default step holds every node whole")
	}
	over := api.StepRequest{NTasks: 1, Overlap: true}
	if gr, ok := g.take(over, mustLayout(t, over)); !ok || gr.held {
		t.Fatalf("--overlap step: %v held=%v, want it to run holding nothing", ok, gr.held)
	}
	woke := g.wait()
	g.give(lw, gw)
	select {
	case <-woke:
	default:
		t.Fatal("giving back did not wake the waiters")
	}
	e1, ok1 := g.take(exact, le)
	e2, ok2 := g.take(exact, le)
	if !ok1 || !ok2 || !slices.Equal(e1.gpus[0], []int{0}) || !slices.Equal(e2.gpus[0], []int{1}) {
		t.Fatalf("two -c2 --gpus-per-task=1 steps: %v %+v, %v %+v; want both on node a with GPUs 0 and 1", ok1, e1, ok2, e2)
	}
	if _, ok := g.take(exact, le); ok {
		t.Fatal("a third -c2 step fitted on a 4-CPU node holding two")
	}
	// -G 1 over both nodes: one GPU on the first node, none on the second.
	gone := api.StepRequest{GPUs: 1, Exact: true}
	lg := mustLayout(t, gone)
	g.give(le, e1)
	gr, ok := g.take(gone, lg)
	if !ok || !slices.Equal(gr.gpus[0], []int{0}) || gr.gpus[1] == nil || len(gr.gpus[1]) != 0 {
		t.Fatalf("-G1 step: %v %+v, want GPU 0 of node a and none of node b", ok, gr)
	}
}

// TestTaskGPUs: a task's CUDA_VISIBLE_DEVICES from its node's devices,
// its step's share and --gpus-per-task / --gpu-bind.
func TestTaskGPUs(t *testing.T) {
	devs := []string{"0", "1", "2", "3"}
	for _, tc := range []struct {
		idx   []int
		bind  string
		per   int
		local int
		want  string
		err   string
	}{
		{idx: nil, local: 1, want: "0,1,2,3"},
		{idx: []int{2, 3}, local: 0, want: "2,3"},
		{idx: []int{2, 3}, per: 1, local: 1, want: "3"},
		{idx: nil, bind: "single:2", local: 3, want: "1"},
		{idx: []int{1, 3}, bind: "map_gpu:1,0", local: 2, want: "3"},
		{idx: nil, bind: "closest", local: 0, want: "0,1,2,3"},
		{idx: []int{0}, bind: "single:1", local: 1, err: "local task 1 has no GPU"},
		{idx: nil, bind: "mask_gpu:0x3,0xc", local: 1, want: "2,3"},
		{idx: nil, bind: "verbose,mask_gpu:0x1*2,0x8", local: 2, want: "3"},
		{idx: []int{0, 1}, bind: "none", per: 1, local: 1, want: "0,1"}, // every task all the step's GPUs
		{idx: []int{0, 1}, bind: "closest", per: 1, local: 1, want: "0,1"},
		{idx: nil, bind: "per_task:2", local: 1, want: "2,3"},
		{bind: "mask_gpu:0x10", err: "names none of the step's 4 GPUs"},
		{bind: "mask_gpu:zz", err: "hexadecimal"},
		{bind: "rank", err: "honours none, closest"},
	} {
		b, err := parseGPUBind(tc.bind, tc.per)
		var got []string
		if err == nil {
			got, err = taskGPUs(devs, tc.idx, b, tc.local)
		}
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc, err, tc.err)
			}
		case err != nil || strings.Join(got, ",") != tc.want:
			t.Errorf("%+v: %v %v, want %s", tc, got, err, tc.want)
		}
	}
}

// TestStepLayoutNodeList: -w puts the named nodes of the allocation in
// the step (all of them) and refuses others, naming what it has.
func TestStepLayoutNodeList(t *testing.T) {
	l, err := stepLayout(resAlloc, api.StepRequest{NodeList: "b"})
	if err != nil || len(l.nodes) != 1 || l.nodes[0].Node != "b" {
		t.Errorf("-w b: %+v %v, want node b alone", l, err)
	}
	if _, err := stepLayout(resAlloc, api.StepRequest{NodeList: "c"}); err == nil || !strings.Contains(err.Error(), "node c is not in the job's allocation; the allocation has 2 node(s): a (4 CPUs, 2 GPUs)") {
		t.Errorf("-w c: %v", err)
	}
	if _, err := stepLayout(resAlloc, api.StepRequest{GPUsPerNode: 3}); err == nil || !strings.Contains(err.Error(), "3 GPUs per node") {
		t.Errorf("--gpus-per-node=3: %v", err)
	}
}

// TestStepName: a step's recorded name is its command's base name, with
// control characters replaced and cut to 64 bytes, so no user command can
// make the controller refuse the node's events.
func TestStepName(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/python3":      "python3",
		"evil\x1b[2Jname\n":     "evil?[2Jname?",
		strings.Repeat("é", 40): strings.Repeat("é", 32),
		"bash":                  "bash",
	} {
		if got := stepName(in); got != want {
			t.Errorf("stepName(%q) = %q, want %q", in, got, want)
		}
	}
}
