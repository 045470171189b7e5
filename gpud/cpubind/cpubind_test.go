package cpubind

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// dual is two sockets of two cores of two threads, numbered as Linux
// numbers them: the first threads of every core (0-3), then their
// siblings (4-7); one NUMA node per socket.
func dual() Topology {
	var t Topology
	for id := range 8 {
		core := id % 4
		t = append(t, CPU{ID: id, Socket: core / 2, Core: core % 2, Node: core / 2})
	}
	return t
}

func all() []int { return []int{0, 1, 2, 3, 4, 5, 6, 7} }

func TestMask(t *testing.T) {
	t.Parallel()
	mustBind := func(s string) Bind {
		b, err := ParseBind(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mustDist := func(s string) Dist {
		d, err := ParseDist(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name    string
		bind    string
		hint    string
		dist    string
		allowed []int
		ntasks  int
		cpt     int
		want    [][]int // per local task
	}{
		{name: "none binds nothing", bind: "none", ntasks: 2, want: [][]int{all(), all()}},
		{name: "verbose alone binds nothing", bind: "verbose", ntasks: 1, want: [][]int{all()}},
		{name: "cores, default block:cyclic, alternates sockets", bind: "cores", ntasks: 4,
			want: [][]int{{0, 4}, {2, 6}, {1, 5}, {3, 7}}},
		{name: "cores, block:block fills a socket first", bind: "cores", dist: "block:block", ntasks: 4,
			want: [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
		{name: "cores, fcyclic spreads one task's cores", bind: "cores", dist: "block:fcyclic", ntasks: 2, cpt: 4,
			want: [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}}},
		{name: "cores with -c2: a core each", bind: "cores", ntasks: 2, cpt: 2, want: [][]int{{0, 4}, {2, 6}}},
		{name: "cores with -c4 cyclic: a socket's cores", bind: "cores", ntasks: 2, cpt: 4, want: [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}}},
		{name: "threads, block:block:block: a core's threads together", bind: "threads", dist: "block:block:block", ntasks: 3,
			want: [][]int{{0}, {4}, {1}}},
		{name: "threads, block:block:cyclic: first threads first", bind: "threads", dist: "block:block:cyclic", ntasks: 3,
			want: [][]int{{0}, {1}, {4}}},
		{name: "sockets", bind: "sockets", ntasks: 3, want: [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}, {0, 1, 4, 5}}},
		{name: "ldoms", bind: "ldoms", ntasks: 2, want: [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}}},
		{name: "rank: core by core", bind: "rank", ntasks: 3, want: [][]int{{0, 4}, {1, 5}, {2, 6}}},
		{name: "rank_ldom", bind: "rank_ldom", ntasks: 3, want: [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}, {0, 1, 4, 5}}},
		{name: "map_cpu reused in turn", bind: "map_cpu:3,6", ntasks: 3, want: [][]int{{3}, {6}, {3}}},
		{name: "map_cpu with repetition", bind: "map_cpu:1*2,5", ntasks: 3, want: [][]int{{1}, {1}, {5}}},
		{name: "mask_cpu", bind: "verbose,mask_cpu:0x3,c", ntasks: 2, want: [][]int{{0, 1}, {2, 3}}},
		{name: "map_ldom", bind: "map_ldom:1,0", ntasks: 2, want: [][]int{{2, 3, 6, 7}, {0, 1, 4, 5}}},
		{name: "mask_ldom", bind: "mask_ldom:0x3", ntasks: 1, want: [][]int{all()}},
		{name: "hint nomultithread: one thread per core", hint: NoMultithread, ntasks: 4, want: [][]int{{0}, {2}, {1}, {3}}},
		{name: "hint multithread: threads", hint: Multithread, ntasks: 2, want: [][]int{{0}, {2}}},
		{name: "hint memory_bound: over sockets", hint: MemoryBound, ntasks: 2, want: [][]int{{0}, {2}}},
		{name: "more tasks than cores share them", bind: "cores", dist: "block:block", ntasks: 6,
			want: [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}}},
		{name: "a pinned allocation: only its CPUs", bind: "cores", allowed: []int{2, 3, 6, 7}, ntasks: 2,
			want: [][]int{{2, 6}, {3, 7}}},
		{name: "a pinned allocation, threads", bind: "threads", allowed: []int{1, 2}, ntasks: 2, want: [][]int{{1}, {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			allowed := tc.allowed
			if allowed == nil {
				allowed = all()
			}
			var got [][]int
			for local := range tc.ntasks {
				m, err := Mask(dual(), allowed, mustBind(tc.bind), tc.hint, mustDist(tc.dist), Task{Local: local, NLocal: tc.ntasks, CPUsPerTask: tc.cpt})
				if err != nil {
					t.Fatalf("task %d: %v", local, err)
				}
				got = append(got, m)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("masks (-want +got):\n%s", d)
			}
		})
	}
}

func TestMaskRefusals(t *testing.T) {
	t.Parallel()
	b, _ := ParseBind("map_cpu:9")
	if _, err := Mask(dual(), all(), b, "", Dist{Sockets: "cyclic"}, Task{NLocal: 1}); err == nil || !strings.Contains(err.Error(), "CPU(s) 9") {
		t.Errorf("map_cpu of a CPU the job lacks: %v", err)
	}
	b, _ = ParseBind("map_ldom:3")
	if _, err := Mask(dual(), all(), b, "", Dist{Sockets: "cyclic"}, Task{NLocal: 1}); err == nil {
		t.Error("map_ldom of a domain the node lacks: no error")
	}
}

func TestParseBind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Bind{
		"q":                    {},
		"v":                    {Verbose: true},
		"verbose,cores":        {Verbose: true, Type: Cores},
		"no":                   {Type: None},
		"map_cpu:0,2*2":        {Type: MapCPU, List: [][]int{{0}, {2}, {2}}},
		"mask_cpu:0x11,0xF":    {Type: MaskCPU, List: [][]int{{0, 4}, {0, 1, 2, 3}}},
		"quiet,map_ldom:0x1,0": {Type: MapLdom, List: [][]int{{1}, {0}}},
	} {
		got, err := ParseBind(in)
		if err != nil {
			t.Errorf("ParseBind(%q): %v", in, err)
			continue
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("ParseBind(%q) (-want +got):\n%s", in, d)
		}
	}
	for in, want := range map[string]string{
		"core":          "unknown type",
		"map_cpu":       "wants a list",
		"mask_cpu:0xg":  "hexadecimal",
		"cores,sockets": "one binding type",
		"map_cpu:1*0":   "repetition",
	} {
		if _, err := ParseBind(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseBind(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestParseDist(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Dist{
		"":                     {Nodes: "block", Sockets: "cyclic", Cores: "cyclic"},
		"cyclic":               {Nodes: "cyclic", Sockets: "cyclic", Cores: "cyclic"},
		"block:block":          {Nodes: "block", Sockets: "block", Cores: "block"},
		"*:fcyclic:block,Pack": {Nodes: "block", Sockets: "fcyclic", Cores: "block"},
		"plane=4":              {Nodes: "plane", Plane: 4, Sockets: "cyclic", Cores: "cyclic"},
	} {
		got, err := ParseDist(in, 0)
		if err != nil || got != want {
			t.Errorf("ParseDist(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if d, err := ParseDist("plane", 3); err != nil || d.Plane != 3 {
		t.Errorf("plane with SLURM_DIST_PLANESIZE=3: %+v, %v", d, err)
	}
	for _, in := range []string{"plane", "arbitrary", "block:zig", "a:b:c:d", "cyclic,Packed", "plane=2:block"} {
		if _, err := ParseDist(in, 0); err == nil {
			t.Errorf("ParseDist(%q): no error", in)
		}
	}
}

func TestVerbose(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bind, hint string
		cpus       []int
		want       string
	}{
		{"verbose,cores", "", []int{0, 4}, "cpu-bind-cores=MASK - n1, task  3  1 [42]: mask 0x11 set\n"},
		{"verbose,map_cpu:5", "", []int{5}, "cpu-bind=MAP  - n1, task  3  1 [42]: mask 0x20 set\n"},
		{"verbose,mask_cpu:3", "", []int{0, 1}, "cpu-bind=MASK - n1, task  3  1 [42]: mask 0x3 set\n"},
		{"verbose,none", "", []int{0, 1, 2, 3}, "cpu-bind=NONE - n1, task  3  1 [42]: mask 0xf\n"},
		{"verbose", "", []int{0, 1}, "cpu-bind=NULL - n1, task  3  1 [42]: mask 0x3\n"},
		{"verbose", NoMultithread, []int{2}, "cpu-bind-cores=MASK - n1, task  3  1 [42]: mask 0x4 set\n"},
	} {
		b, _ := ParseBind(tc.bind)
		if got := Verbose(b, tc.hint, "n1", 3, 1, 42, tc.cpus); got != tc.want {
			t.Errorf("Verbose(%s, %s) = %q, want %q", tc.bind, tc.hint, got, tc.want)
		}
	}
}

func TestListFormat(t *testing.T) {
	t.Parallel()
	if got := List([]int{8, 0, 1, 2, 3, 10, 11}); got != "0-3,8,10-11" {
		t.Errorf("List = %q", got)
	}
	got, err := ParseList("0-3,8,10-11\n")
	if err != nil || fmt.Sprint(got) != "[0 1 2 3 8 10 11]" {
		t.Errorf("ParseList = %v, %v", got, err)
	}
	if Format([]int{0, 65}) != "20000000000000001" || Format(nil) != "0" {
		t.Errorf("Format: %s %s", Format([]int{0, 65}), Format(nil))
	}
}

func TestReadTopology(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/cpu/online", "0-7")
	for _, c := range dual() {
		write(fmt.Sprintf("devices/system/cpu/cpu%d/topology/core_id", c.ID), fmt.Sprint(c.Core))
		write(fmt.Sprintf("devices/system/cpu/cpu%d/topology/physical_package_id", c.ID), fmt.Sprint(c.Socket))
	}
	write("devices/system/node/node0/cpulist", "0-1,4-5")
	write("devices/system/node/node1/cpulist", "2-3,6-7")
	got, err := ReadTopology(root)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(dual(), got); d != "" {
		t.Errorf("ReadTopology (-want +got):\n%s", d)
	}
}
