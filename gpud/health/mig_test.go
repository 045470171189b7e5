package health

import (
	"slices"
	"testing"
	"time"
)

// TestMIGInstanceFault: a contained ECC error (XID 94) that NVML
// attributes to one MIG instance of GPU 3 latches a drain-slice fault of
// that instance alone (its GPU and the GPU's other instance stay in
// service and pass their gate); an uncontained one (XID 95) attributed
// to an instance is the GPU's. The instance is probed after ProbeAfter of
// clean samples and readmitted, and a GPU that vanishes is the GPU's
// fault, never its instances'.
func TestMIGInstanceFault(t *testing.T) {
	t.Parallel()
	const slice, other = "MIG-3a", "MIG-3b"
	m := New(DefaultTriage(), DefaultLimits(), inventory(8))
	m.Observe(t0, node(8, nil))
	at := t0.Add(time.Second)
	rep := m.Observe(at, node(8, func(i int, r *Reading) {
		if i == 3 {
			r.MIGXIDs = map[string][]int{slice: {94}}
		}
	}))
	if len(rep.New) != 1 || rep.New[0].UUID != slice || rep.New[0].Parent != uuidOf(3) || rep.New[0].Action != DrainSlice || rep.New[0].GPU != 3 {
		t.Fatalf("XID 94 on MIG instance %s: new findings %+v, want one drain-slice of the instance (parent %s, gpu 3)", slice, rep.New, uuidOf(3))
	}
	if len(rep.Faults) != 1 || rep.Faults[0].UUID != slice {
		t.Fatalf("faults %+v, want the instance's alone", rep.Faults)
	}
	if m.Faulted(uuidOf(3)) || !m.Faulted(slice) || m.Faulted(other) {
		t.Fatalf("faulted: gpu3 %v, %s %v, %s %v; want only %s", m.Faulted(uuidOf(3)), slice, m.Faulted(slice), other, m.Faulted(other), slice)
	}
	if p := m.Parent(slice); p != uuidOf(3) {
		t.Fatalf("Parent(%s) = %q, want %s", slice, p, uuidOf(3))
	}
	if fs := m.Gate([]string{uuidOf(3)}, node(8, nil)); len(fs) != 0 {
		t.Fatalf("the GPU of a faulted instance fails its gate (a job on its other instance could not start): %+v", fs)
	}
	// Clean samples for ProbeAfter: the instance is due a probe, and no
	// GPU (nor a missing-GPU finding for the instance) shows up.
	var due []string
	for k := 2; k <= 70; k++ {
		rep = m.Observe(t0.Add(time.Duration(k)*time.Second), node(8, nil))
		if len(rep.New) != 0 {
			t.Fatalf("clean sample %d: new findings %+v", k, rep.New)
		}
		due = rep.ProbeDue
	}
	if !slices.Equal(due, []string{slice}) {
		t.Fatalf("probe due %v after 69 clean seconds, want [%s]", due, slice)
	}
	if cleared := m.Readmit(slice); len(cleared) != 1 || cleared[0].Code != "xid94" {
		t.Fatalf("Readmit(%s) cleared %+v, want xid94", slice, cleared)
	}
	if len(m.Faults()) != 0 {
		t.Fatalf("faults after the readmission: %+v", m.Faults())
	}
	// XID 95 attributed to an instance needs the whole GPU reset.
	rep = m.Observe(t0.Add(80*time.Second), node(8, func(i int, r *Reading) {
		if i == 3 {
			r.MIGXIDs = map[string][]int{other: {95}}
		}
	}))
	if len(rep.New) != 1 || rep.New[0].UUID != uuidOf(3) || rep.New[0].Parent != "" || rep.New[0].Action != DrainGPU {
		t.Fatalf("XID 95 on MIG instance %s: new findings %+v, want drain-gpu of GPU 3", other, rep.New)
	}
	// Gate: an XID 95 of an instance not yet taken fails the GPU's gate,
	// an XID 94 does not.
	m2 := New(DefaultTriage(), DefaultLimits(), inventory(8))
	m2.Observe(t0, node(8, nil))
	for x, fails := range map[int]bool{94: false, 95: true} {
		fs := m2.Gate([]string{uuidOf(3)}, node(8, func(i int, r *Reading) {
			if i == 3 {
				r.MIGXIDs = map[string][]int{slice: {x}}
			}
		}))
		if (len(fs) > 0) != fails {
			t.Errorf("gate of GPU 3 with XID %d on an instance: %+v, want failing %v", x, fs, fails)
		}
	}
	// Held (an agent restarted) then the GPU gone: the GPU is missing,
	// the instance is not reported missing.
	m3 := New(DefaultTriage(), DefaultLimits(), inventory(8))
	m3.Hold(Finding{GPU: 3, UUID: slice, Parent: uuidOf(3), Code: "xid94", Action: DrainSlice})
	rep = m3.Observe(t0, node(8, func(i int, r *Reading) {
		if i == 3 {
			r.UUID = ""
		}
	}))
	for _, f := range rep.New {
		if f.UUID != uuidOf(3) || f.Code != CodeGPUMissing {
			t.Errorf("GPU 3 vanished: finding %+v, want only gpu-missing of GPU 3", f)
		}
	}
}
