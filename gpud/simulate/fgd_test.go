package simulate

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string][]uint64{"1": {1}, "42..45": {42, 43, 44, 45}, "1,3..4": {1, 3, 4}} {
		if got, err := ParseSeeds(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseSeeds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "5..4", "1..", "0..20000"} {
		if _, err := ParseSeeds(in); err == nil || !strings.Contains(err.Error(), "is not a seed") {
			t.Errorf("ParseSeeds(%q) error = %v, want one naming the bad part", in, err)
		}
	}
}

// gpud simulate --fgd on a tiny openb-format trace and node list.
func TestSimulateFGD(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "pods.csv")
	nl := filepath.Join(dir, "nodes.csv")
	pods := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"p0,4000,1024,1,600,,LS,Running,0,10,0\np1,2000,1024,1,1000,,LS,Running,1,10,1\np2,1000,512,0,0,,BE,Running,2,10,2\n"
	nodes := "sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,2,T4\nn1,32000,65536,4,V100M16\n"
	if err := os.WriteFile(tr, []byte(pods), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nl, []byte(nodes), 0o644); err != nil {
		t.Fatal(err)
	}
	// run is gpud simulate --fgd --trace tr --nodes nl with the flags'
	// defaults, then set's changes.
	run := func(set func(*Options)) (string, error) {
		var out bytes.Buffer
		o := Options{FGD: true, Trace: tr, NodesFile: nl, Format: "auto", RuntimeEstimate: "exact", Seed: "1",
			Placements: DefaultPlacements(), Demand: 100, Out: &out}
		if set != nil {
			set(&o)
		}
		err := Run(o)
		return out.String(), err
	}
	out, err := run(func(o *Options) { o.Seed, o.Plot = "42..44", filepath.Join(dir, "plot") })
	if err != nil {
		t.Fatalf("simulate --fgd: %v\n%s", err, out)
	}
	for _, want := range []string{"6 GPUs", "3 seed(s) 42..44", "random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "sched:fgd", "published (Weng et al."} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "plot", "alloc_curve.svg")); err != nil {
		t.Errorf("no allocation curve plot: %v", err)
	}
	if _, err := run(func(o *Options) { o.Placements = []string{"best-fit"} }); err == nil || !strings.Contains(err.Error(), `"best-fit" is not a placement`) {
		t.Errorf("--placement best-fit: error %v", err)
	}
	if _, err := run(func(o *Options) { o.Placements = []string{"sched:tetris"} }); err == nil || !strings.Contains(err.Error(), `"tetris" is not a placement`) {
		t.Errorf("--placement sched:tetris: error %v", err)
	}
	if _, err := run(func(o *Options) { o.Demand = 0 }); err == nil || !strings.Contains(err.Error(), "--demand 0") {
		t.Errorf("--demand 0: error %v", err)
	}

	// --compare: published curves for this workload ("pods"), k = 0..2 only.
	pub := filepath.Join(dir, "pub.csv")
	if err := os.WriteFile(pub, []byte("workload,sc_policy,tune,seed,total_gpus,0,1,2\n"+
		"pods,05-BestFit,1.3,42,6,0.0,10.0,20.0\npods,05-BestFit,1.3,43,6,0.0,12.0,22.0\nother,06-FGD,1.3,42,6,1,2,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(func(o *Options) {
		o.Seed, o.Demand, o.Compare, o.Placements, o.Plot = "42..43", 2, pub, []string{"bestfit", "fgd"}, filepath.Join(dir, "cmp")
	})
	if err != nil {
		t.Fatalf("simulate --fgd --compare: %v\n%s", err, out)
	}
	for _, want := range []string{"paper@2%", "max |gap|", "21.00", "compare.csv"} {
		if !strings.Contains(out, want) {
			t.Errorf("--compare output lacks %q:\n%s", want, out)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "cmp", "compare.csv"))
	if err != nil || !strings.Contains(string(csv), "bestfit,05-BestFit,1,") || strings.Contains(string(csv), "06-FGD") {
		t.Errorf("compare.csv (%v):\n%s", err, csv)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmp", "compare.svg")); err != nil {
		t.Errorf("no comparison plot: %v", err)
	}
	out, err = run(func(o *Options) {
		o.Seed, o.Demand, o.Compare, o.Placements, o.Markdown = "42..43", 2, pub, []string{"bestfit", "sched:fgd"}, true
	})
	if err != nil || !strings.Contains(out, "| BestFit (`bestfit`) | 21.00 (20.00–22.00) |") || !strings.Contains(out, "over BestFit |") {
		t.Errorf("--markdown (%v):\n%s", err, out)
	}
	if _, err := run(func(o *Options) { o.Compare = filepath.Join(dir, "pods.csv") }); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Errorf("--compare with a pod list: error %v", err)
	}
	if _, err := run(func(o *Options) { o.Vary = []string{"tie=first"} }); err == nil || !strings.Contains(err.Error(), "tie=rank|name|random") {
		t.Errorf("--vary tie=first: error %v", err)
	}
}
