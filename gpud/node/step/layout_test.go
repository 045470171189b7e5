package step

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func TestStepLayout(t *testing.T) {
	alloc := []spec.NodeAlloc{
		{Node: "b", Rank: 1, CPUs: 8, GPUs: []string{"g3", "g4"}},
		{Node: "a", Rank: 0, CPUs: 8, GPUs: []string{"g1", "g2"}},
	}
	for _, tc := range []struct {
		req   api.StepRequest
		nodes []string
		tasks [][]int
		tpn   string
		err   string
	}{
		{req: api.StepRequest{}, nodes: []string{"a", "b"}, tasks: [][]int{{0}, {1}}, tpn: "1(x2)"},
		{req: api.StepRequest{NTasks: 1}, nodes: []string{"a"}, tasks: [][]int{{0}}, tpn: "1"},
		{req: api.StepRequest{NTasksPerNode: 2, GPUsPerTask: 1}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 1}, {2, 3}}, tpn: "2(x2)"},
		{req: api.StepRequest{NTasks: 3}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 1}, {2}}, tpn: "2,1"},
		{req: api.StepRequest{NTasks: 4, Nodes: 1, CPUsPerTask: 2}, nodes: []string{"a"}, tasks: [][]int{{0, 1, 2, 3}}, tpn: "4"},
		{req: api.StepRequest{NTasks: 4, Distribution: "cyclic"}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 2}, {1, 3}}, tpn: "2(x2)"},
		{req: api.StepRequest{NTasks: 3, Distribution: "cyclic:block"}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 2}, {1}}, tpn: "2,1"},
		{req: api.StepRequest{NTasks: 6, Nodes: 2, Distribution: "plane=2"}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 1, 4, 5}, {2, 3}}, tpn: "4,2"},
		{req: api.StepRequest{NTasks: 2, Nodes: 2, Distribution: "plane=4"}, nodes: []string{"a"}, tasks: [][]int{{0, 1}}, tpn: "2"},
		{req: api.StepRequest{NTasks: 2, Distribution: "arbitrary"}, err: "arbitrary"},
		{req: api.StepRequest{Nodes: 3}, err: "asks for 3 nodes but the allocation has 2 node(s): a (8 CPUs, 2 GPUs), b (8 CPUs, 2 GPUs)"},
		{req: api.StepRequest{NTasksPerNode: 3, GPUsPerTask: 1}, err: "needs 3 GPUs on node a"},
		{req: api.StepRequest{NTasks: 1, Nodes: 1, CPUsPerTask: 9}, err: "needs 9 CPUs on node a"},
		{req: api.StepRequest{NTasks: 1, Nodes: 2}, err: "each node needs at least one task"},
	} {
		l, err := stepLayout(alloc, tc.req)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc.req, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.req, err)
			continue
		}
		var names []string
		for _, n := range l.nodes {
			names = append(names, n.Node)
		}
		if !slices.Equal(names, tc.nodes) || len(l.tasks) != len(tc.tasks) || tasksPerNode(l) != tc.tpn {
			t.Errorf("%+v: nodes %v tasks %v tpn %q; want %v %v %q", tc.req, names, l.tasks, tasksPerNode(l), tc.nodes, tc.tasks, tc.tpn)
			continue
		}
		for i := range l.tasks {
			if !slices.Equal(l.tasks[i], tc.tasks[i]) {
				t.Errorf("%+v: tasks %v, want %v", tc.req, l.tasks, tc.tasks)
			}
		}
	}
}
