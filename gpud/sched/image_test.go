package sched_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

const img = "reg.example:5000/team/app:1"

// withImages is n holding the images.
func withImages(n sched.Node, images ...string) sched.Node {
	n.Images = map[string]bool{}
	for _, i := range images {
		n.Images[i] = true
	}
	return n
}

func weighted(n sched.Node, w int) sched.Node { n.Weight = w; return n }

func imageJob(id spec.JobID, nodes, gpus int, image string) sched.Job {
	j := pjob(id, nodes, gpus)
	j.Image = image
	return j
}

// TestImageTieBreaker: a job goes to the nodes that hold its image only
// among placements the policy finds equally good; it never overrides fit,
// the policy's score, node weight or priority.
func TestImageTieBreaker(t *testing.T) {
	t.Parallel()
	frac := func(id spec.JobID, f float64) sched.Job {
		return sched.Job{ID: id, Partition: "batch", Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUFraction: f}, Image: img}
	}
	for _, tc := range []struct {
		name  string
		pol   sched.Placement
		nodes []sched.Node
		jobs  []sched.Job
		// want is where job 1 starts (and job 2's after "/", if any).
		want string
	}{
		{name: "pack/equal nodes: the holder", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "b"},
		{name: "pack/without image: by name", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img)}, jobs: []sched.Job{pjob(1, 1, 2)}, want: "a"},
		{name: "pack/other image: by name", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), "other:1")}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "a"},
		{name: "pack/best fit wins over the image", pol: sched.PlacePack,
			nodes: []sched.Node{withImages(pnode("a", 8), img), pnode("b", 8, 0, 1, 2, 3, 4, 5)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "b"},
		{name: "pack/a holder that does not fit is no choice", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8, 0, 1, 2, 3, 4, 5, 6), img)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "a"},
		{name: "pack/weight wins over the image", pol: sched.PlacePack,
			nodes: []sched.Node{weighted(pnode("a", 8), 1), weighted(withImages(pnode("b", 8), img), 2)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "a"},
		{name: "pack/equal weight: the holder", pol: sched.PlacePack,
			nodes: []sched.Node{weighted(pnode("a", 8), 2), weighted(withImages(pnode("c", 8), img), 2), weighted(pnode("b", 8), 1)},
			jobs:  []sched.Job{imageJob(1, 1, 2, img)}, want: "b"},
		{name: "pack/equal weight, no lighter node: the holder", pol: sched.PlacePack,
			nodes: []sched.Node{weighted(pnode("a", 8), 2), weighted(withImages(pnode("c", 8), img), 2), weighted(pnode("b", 8, 0, 1, 2, 3, 4, 5, 6, 7), 1)},
			jobs:  []sched.Job{imageJob(1, 1, 2, img)}, want: "c"},
		{name: "pack/gang: holders first, ranks by name", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img), pnode("c", 8), withImages(pnode("d", 8), img)},
			jobs:  []sched.Job{imageJob(1, 2, 8, img)}, want: "b,d"},
		{name: "pack/gang: holders, then by name", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), pnode("b", 8), withImages(pnode("c", 8), img)},
			jobs:  []sched.Job{imageJob(1, 2, 8, img)}, want: "a,c"},
		{name: "spread/most free wins over the image", pol: sched.PlaceSpread,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8, 0), img)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "a"},
		{name: "spread/equal nodes: the holder", pol: sched.PlaceSpread,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "b"},
		{name: "first-fit/by name, whatever the image", pol: sched.PlaceFirstFit,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "a"},
		{name: "fgd/equal nodes: the holder", pol: sched.PlaceFGD,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img)}, jobs: []sched.Job{imageJob(1, 1, 2, img)}, want: "b"},
		{name: "fraction/equal nodes: the holder", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 1), withImages(pnode("b", 1), img)}, jobs: []sched.Job{frac(1, 0.5)}, want: "b"},
		{name: "priority first: the higher job takes the holder", pol: sched.PlacePack,
			nodes: []sched.Node{pnode("a", 8), withImages(pnode("b", 8), img)},
			jobs: []sched.Job{func() sched.Job { j := imageJob(1, 1, 8, img); j.Priority = 1; return j }(),
				func() sched.Job { j := imageJob(2, 1, 8, img); j.Priority = 9; return j }()},
			want: "a/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snap := &sched.Snapshot{Nodes: tc.nodes, Jobs: tc.jobs, Partitions: []sched.Partition{{Name: "batch"}}}
			cfg := sched.Config{Placement: tc.pol}
			plan := sched.Schedule(snap, bt0, cfg)
			if err := sched.VerifyPlan(snap, bt0, cfg, plan); err != nil {
				t.Fatal(err)
			}
			var got []string
			for id := range tc.jobs {
				n, _ := placed(t, plan, spec.JobID(id+1))
				got = append(got, strings.Join(n, ","))
			}
			if g := strings.Join(got, "/"); g != tc.want {
				t.Errorf("placed on %s, want %s", g, tc.want)
			}
		})
	}
}

// TestImageTieBreakerDeterministic: the same snapshot gives the same plan
// however many nodes hold the image.
func TestImageTieBreakerDeterministic(t *testing.T) {
	t.Parallel()
	var nodes []sched.Node
	for i := range 130 { // more than two words of node bits
		n := pnode(fmt.Sprintf("n%03d", i), 8)
		if i%7 == 3 {
			n = withImages(n, img)
		}
		nodes = append(nodes, n)
	}
	var jobs []sched.Job
	for i := range 40 {
		jobs = append(jobs, imageJob(spec.JobID(i+1), 1, 4, img))
	}
	first := ""
	for range 3 {
		snap := &sched.Snapshot{Nodes: nodes, Jobs: jobs, Partitions: []sched.Partition{{Name: "batch"}}}
		plan := sched.Schedule(snap, bt0, sched.Config{})
		if err := sched.VerifyPlan(snap, bt0, sched.Config{}, plan); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(plan.Starts)
		if first == "" {
			first = got
			// Pack: each holder takes two 4-GPU jobs before any other node.
			n, _ := placed(t, plan, 1)
			if n[0] != "n003" {
				t.Errorf("job 1 on %v, want n003 (the first holder)", n)
			}
			n, _ = placed(t, plan, 2)
			if n[0] != "n003" {
				t.Errorf("job 2 on %v, want n003 (best fit, a holder)", n)
			}
			n, _ = placed(t, plan, 3)
			if n[0] != "n010" {
				t.Errorf("job 3 on %v, want n010 (the next holder)", n)
			}
		} else if got != first {
			t.Fatalf("plans differ:\n%s\n%s", first, got)
		}
	}
}

// TestStateSetImages: a State's Submit places by the inventories as they
// are now (SetImages), not as its full cycle saw them, and a node holding
// the job's image taken away again goes back to name order.
func TestStateSetImages(t *testing.T) {
	t.Parallel()
	nodes := []sched.Node{pnode("a", 8), pnode("b", 8), pnode("c", 8)}
	snap := &sched.Snapshot{Nodes: nodes, Partitions: []sched.Partition{{Name: "batch"}}}
	st, _ := sched.NewState(snap, bt0, sched.Config{})
	submit := func(id spec.JobID) string {
		t.Helper()
		plan := st.Submit(imageJob(id, 1, 8, img), bt0)
		n, _ := placed(t, plan, id)
		return strings.Join(n, ",")
	}
	st.SetImages("b", map[string]bool{img: true})
	st.SetImages("nowhere", map[string]bool{img: true}) // ignored
	if got := submit(1); got != "b" {
		t.Errorf("job 1 on %s after b's inventory came, want b", got)
	}
	st.SetImages("b", nil)
	st.SetImages("c", map[string]bool{"other:1": true})
	if got := submit(2); got != "a" {
		t.Errorf("job 2 on %s with no node holding its image, want a (by name)", got)
	}
}
