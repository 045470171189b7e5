package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// The partition's placement reaches the scheduler: with spread the second
// 1-GPU job goes to the other (idle) node, with pack beside the first.
func TestPartitionPlacement(t *testing.T) {
	for _, tc := range []struct {
		pol  sched.Placement
		want string
	}{{"", "n1"}, {sched.PlacePack, "n1"}, {sched.PlaceSpread, "n2"}} {
		t.Run(string(tc.pol), func(t *testing.T) {
			h := newHarness(t, newFakeStore(), func(c *Config) { c.Partitions[0].Placement = tc.pol })
			h.register("n1", 4)
			h.register("n2", 4)
			first := h.submit(alice, gpus(1, 0, ""))
			if a := h.job(first).Alloc; a == nil || a.Nodes[0].Node != "n1" {
				t.Fatalf("first job alloc %+v, want n1", a)
			}
			second := h.submit(alice, gpus(1, 0, ""))
			if a := h.job(second).Alloc; a == nil || a.Nodes[0].Node != tc.want {
				t.Errorf("second job alloc %+v, want %s", a, tc.want)
			}
		})
	}
}

// A node's reported NVLink peers keep a 2-GPU job on one NVLink pair even
// when the pair's GPUs are not adjacent by index.
func TestNVLinkPeersPlaceInOneGroup(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	inv := spec.Inventory{Name: "n1", CPUs: 8, MemMiB: 1000}
	uuid := func(i int) string { return fmt.Sprintf("GPU-n1-%d", i) }
	for i := range 4 {
		// Pairs {0,2} and {1,3}; each GPU reports only its own peer.
		inv.GPUs = append(inv.GPUs, spec.GPU{UUID: uuid(i), Model: "h100", NUMANode: 0, NVLinkPeers: []string{uuid(i ^ 2)}})
	}
	if _, err := h.c.Register(context.Background(), root, inv); err != nil {
		t.Fatal(err)
	}
	id := h.submit(alice, gpus(2, 0, ""))
	a := h.job(id).Alloc
	if a == nil {
		t.Fatal("job did not start")
	}
	got := slices.Sorted(slices.Values(a.Nodes[0].GPUs))
	if want := []string{uuid(0), uuid(2)}; !slices.Equal(got, want) {
		t.Errorf("GPUs %v, want the NVLink pair %v", got, want)
	}
}

func TestNVLinkGroups(t *testing.T) {
	g := func(uuid string, peers ...string) spec.GPU { return spec.GPU{UUID: uuid, NVLinkPeers: peers} }
	for _, tc := range []struct {
		name string
		gpus []spec.GPU
		want []int
	}{
		{"none", []spec.GPU{g("a"), g("b")}, []int{0, 0}},
		{"one direction and a chain", []spec.GPU{g("a", "b"), g("b"), g("c", "d"), g("d", "e"), g("e"), g("f")}, []int{1, 1, 2, 2, 2, 0}},
		{"switch", []spec.GPU{g("a", "b", "c"), g("b", "a", "c"), g("c", "a", "b")}, []int{1, 1, 1}},
		{"unknown peer", []spec.GPU{g("a", "zz"), g("b")}, []int{0, 0}},
	} {
		if got := nvlinkGroups(tc.gpus); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
