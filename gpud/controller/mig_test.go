package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func TestMIGLayoutMergesReportedAndHeld(t *testing.T) {
	pl := func(start, size int) spec.MIGPlacement { return spec.MIGPlacement{Start: start, Size: size} }
	g := spec.GPU{UUID: "G", MIGMode: spec.MIGStatic, MIGSlices: []spec.MIGSlice{
		{GPU: "G", Profile: "3g.40gb", Placement: pl(4, 3), UUID: "MIG-b"},
		{GPU: "G", Profile: "1g.10gb", Placement: pl(0, 1), UUID: "MIG-a"},
	}}
	held := []spec.MIGSlice{
		{GPU: "G", Profile: "1g.10gb", Placement: pl(0, 1), Job: 7},                // the reported instance
		{GPU: "G", Profile: "2g.20gb", Placement: pl(2, 2), UUID: "MIG-c", Job: 8}, // made after registration
	}
	want := []spec.MIGSlice{
		{GPU: "G", Profile: "1g.10gb", Placement: pl(0, 1), UUID: "MIG-a", Job: 7},
		{GPU: "G", Profile: "2g.20gb", Placement: pl(2, 2), UUID: "MIG-c", Job: 8},
		{GPU: "G", Profile: "3g.40gb", Placement: pl(4, 3), UUID: "MIG-b"},
	}
	if diff := cmp.Diff(want, migLayout(g, held)); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
	if g.MIGSlices[1].Job != 0 {
		t.Error("migLayout changed the inventory")
	}
}

func TestCheckProfileListsOffered(t *testing.T) {
	mig := &nodeRec{inv: spec.Inventory{Name: "n1", GPUs: []spec.GPU{{Model: "h100", MIGMode: spec.MIGDynamic,
		MIGProfiles: []spec.MIGProfile{{Name: "1g.10gb"}, {Name: "7g.80gb"}}}}}}
	plain := &nodeRec{inv: spec.Inventory{Name: "n2", GPUs: []spec.GPU{{Model: "h100"}}}}
	if err := checkProfile([]*nodeRec{plain, mig}, &spec.Resources{GPUProfile: "1g.10gb"}); err != nil {
		t.Errorf("offered profile refused: %v", err)
	}
	err := checkProfile([]*nodeRec{plain, mig}, &spec.Resources{GPUProfile: "5g.60gb"})
	if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "offers 1g.10gb, 7g.80gb") {
		t.Errorf("err = %v, want ErrInvalid listing 1g.10gb, 7g.80gb", err)
	}
	if err := checkProfile([]*nodeRec{plain}, &spec.Resources{GPUProfile: "1g.10gb"}); err == nil || !strings.Contains(err.Error(), "no node of the partition offers MIG") {
		t.Errorf("err = %v, want no MIG node", err)
	}
}
