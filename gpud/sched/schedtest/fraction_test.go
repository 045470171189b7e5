package schedtest

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func gpuOf(t *testing.T, h *Harness, id spec.JobID) string {
	t.Helper()
	r := h.Job(id)
	if r == nil || len(r.Nodes) != 1 || len(r.Nodes[0].GPUs) != 1 {
		t.Fatalf("job %d: not running on exactly one GPU: %+v", id, r)
	}
	return r.Nodes[0].GPUs[0]
}

// The must-show: two jobs with fractions 0.5 share one GPU; a
// third 0.5 goes to another GPU.
func TestFractionMustShow(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(2).Obj())
	h.Submit(MakeJob(1).Fraction(0.5).Time(time.Hour).Obj(), MakeJob(2).Fraction(0.5).Time(time.Hour).Obj())
	h.Cycle()
	g1, g2 := gpuOf(t, h, 1), gpuOf(t, h, 2)
	if g1 != g2 {
		t.Errorf("jobs 1 and 2 on %s and %s, want one shared GPU", g1, g2)
	}
	if f := h.Job(1).Nodes[0].GPUFraction; f != 0.5 {
		t.Errorf("job 1 alloc fraction = %g, want 0.5", f)
	}
	// In a later cycle, from the snapshot's FreeFraction.
	h.Submit(MakeJob(3).Fraction(0.5).Time(time.Hour).Obj())
	h.Cycle()
	if g3 := gpuOf(t, h, 3); g3 == g1 {
		t.Errorf("job 3 on the full GPU %s", g3)
	}
}

// Packing: a share goes to the most used GPU that still fits; a whole-GPU
// job never takes a partly used GPU; fractions never exceed 1 per GPU
// (VerifyPlan runs in every Cycle).
func TestFractionPackingAndWholeGPUs(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(3).Obj())
	h.Submit(MakeJob(1).Fraction(0.25).Time(time.Hour).Obj(), MakeJob(2).Fraction(0.5).Time(time.Hour).Obj())
	h.Cycle()
	shared := gpuOf(t, h, 1)
	if gpuOf(t, h, 2) != shared {
		t.Fatalf("0.25 and 0.5 not packed on one GPU")
	}
	// Three whole GPUs are asked for but only two are wholly free (the
	// shared GPU is not handed out whole).
	h.Submit(MakeJob(3).GPUs(3).Time(time.Hour).Obj())
	h.Cycle()
	if h.IsRunning(3) {
		t.Fatalf("3-GPU job started; it would need the shared GPU %s", shared)
	}
	// 0.25 still fits on the shared GPU (0.75 used), 0.3 does not.
	h.Submit(MakeJob(4).Fraction(0.25).Time(time.Minute).Obj(), MakeJob(5).Fraction(0.3).Time(time.Minute).Obj())
	h.Cycle()
	if !h.IsRunning(4) || gpuOf(t, h, 4) != shared {
		t.Errorf("job 4 (0.25) should fill the shared GPU")
	}
	if h.IsRunning(5) && gpuOf(t, h, 5) == shared {
		t.Errorf("job 5 (0.3) over-shares GPU %s", shared)
	}
}

// Shares of a GPU free it for whole-GPU jobs only when the last sharer
// ends; the 1-GPU job's reservation is at that time (conservative).
func TestFractionReleasesAtLastSharer(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(1).Obj())
	h.Submit(MakeJob(1).Fraction(0.5).Time(10*time.Minute).Obj(), MakeJob(2).Fraction(0.5).Time(30*time.Minute).Obj())
	h.Cycle()
	h.Submit(MakeJob(3).GPUs(1).Time(time.Hour).Obj())
	h.Cycle()
	if got, want := h.ExpectedStart(3), T0.Add(30*time.Minute); !got.Equal(want) {
		t.Errorf("job 3 expected start = %s, want %s (the last sharer's end)", got, want)
	}
	h.Run(time.Minute, 200)
	if !h.IsRunning(3) && len(h.Pending()) != 0 {
		t.Errorf("job 3 never ran; pending %v", h.Pending())
	}
}
