package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/fake"
)

func writeNUMA(t *testing.T, lists ...string) string {
	t.Helper()
	root := t.TempDir()
	for i, l := range lists {
		d := filepath.Join(root, "devices", "system", "node", "node"+string(rune('0'+i)))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cpulist"), []byte(l+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCPUListRoundTrip(t *testing.T) {
	for _, s := range []string{"0-3,8,10-11", "5", ""} {
		ids, err := parseCPUList(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatCPUList(ids); got != s {
			t.Errorf("formatCPUList(parseCPUList(%q)) = %q", s, got)
		}
	}
	for _, bad := range []string{"a", "3-1", "1-x"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q): no error", bad)
		}
	}
}

func TestCPUPins(t *testing.T) {
	topo, err := readCPUTopology(writeNUMA(t, "0-3", "4-7"))
	if err != nil {
		t.Fatal(err)
	}
	p := &cpuPins{topo: topo, owner: map[int]string{}}
	for _, tc := range []struct {
		alloc      string
		n          int
		prefer     []int
		cpus, mems string
	}{
		{"a", 2, []int{1}, "4-5", "1"},  // the GPUs' NUMA node
		{"b", 3, []int{1}, "0,6-7", ""}, // spills over: no memory binding
		{"c", 4, []int{0}, "", ""},      // only 3 free cores left: no pinning
		{"d", 3, []int{0}, "1-3", "0"},  // fits on node 0
		{"e", 1, nil, "", ""},           // none free at all
	} {
		cpus, mems := p.pick(tc.alloc, tc.n, tc.prefer)
		if cpus != tc.cpus || mems != tc.mems {
			t.Errorf("pick(%s, %d, %v) = %q, %q; want %q, %q", tc.alloc, tc.n, tc.prefer, cpus, mems, tc.cpus, tc.mems)
		}
	}
	p.release("a")
	// GPUs on nodes 1 and 3 (node 3 has no CPUs): bind only the memory
	// node the cores came from.
	if cpus, mems := p.pick("f", 2, []int{1, 3}); cpus != "4-5" || mems != "1" {
		t.Errorf("after release, pick = %q, %q; want 4-5, 1", cpus, mems)
	}
}

// TestCPUPinsPeek: peek names the cores pick will give once the
// allocations that are freeing their cores have ended, and takes none.
func TestCPUPinsPeek(t *testing.T) {
	topo, err := readCPUTopology(writeNUMA(t, "0-3", "4-7"))
	if err != nil {
		t.Fatal(err)
	}
	p := &cpuPins{topo: topo, owner: map[int]string{}}
	p.pick("a", 4, []int{1}) // 4-7, the whole of node 1
	p.pick("b", 2, []int{0}) // 0-1
	for _, tc := range []struct {
		n          int
		freeing    map[string]bool
		cpus, mems string
	}{
		{4, map[string]bool{"a": true}, "4-7", "1"}, // a's cores, once a ended
		{2, nil, "2-3", ""},                         // nobody ends: the free ones, off the GPUs' node
		{4, nil, "", ""},                            // too few free
		{6, map[string]bool{"a": true, "b": true}, "0-1,4-7", ""},
	} {
		if cpus, mems := p.peek(tc.n, []int{1}, tc.freeing); cpus != tc.cpus || mems != tc.mems {
			t.Errorf("peek(%d, [1], %v) = %q, %q; want %q, %q", tc.n, tc.freeing, cpus, mems, tc.cpus, tc.mems)
		}
	}
	p.release("a")
	if cpus, mems := p.pick("c", 4, []int{1}); cpus != "4-7" || mems != "1" {
		t.Errorf("pick after a ended = %q, %q; want what peek said: 4-7, 1", cpus, mems)
	}
}

func TestGPUJobPinnedToItsGPUsNUMANode(t *testing.T) {
	sysfs := writeNUMA(t, "0-7", "8-15")
	e := &env{fc: newFakeController(t), rt: fake.New(), clock: newFakeClock(), dir: t.TempDir()}
	e.rt.SetClock(e.clock.Now)
	e.agent, e.stop = startTestAgent(t, func(c *Config) {
		c.StateDir = e.dir
		c.SysfsRoot = sysfs
		c.Inventory.GPUs = []spec.GPU{
			{Index: 0, UUID: "GPU-a", Model: "h100", NUMANode: 1, CDIName: "nvidia.com/gpu=GPU-a"},
			{Index: 1, UUID: "GPU-b", Model: "h100", NUMANode: 1, CDIName: "nvidia.com/gpu=GPU-b"},
		}
	}, e.fc.Client, e.rt, WithClock(e.clock))
	e.fc.Set(asg(7, e.home)) // 4 CPUs, GPUs a and b
	e.waitStarted(t, cid)
	got, _ := e.rt.Config(cid)
	if got.CPUSet != "8-11" || got.CPUMems != "1" {
		t.Errorf("cpuset %q mems %q, want 8-11 on NUMA node 1", got.CPUSet, got.CPUMems)
	}
}
