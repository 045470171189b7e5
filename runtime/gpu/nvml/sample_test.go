package nvml

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/runtime/gpu"
)

func sample(t *testing.T, backend string, opts ...Option) []gpu.Sample {
	t.Helper()
	d, err := Open(context.Background(), backend, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := d.(gpu.Sampler).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMockSamplesAreSyntheticAndStable(t *testing.T) {
	t.Parallel()
	a := sample(t, BackendDGXH100, WithMockSeed("node-a"))
	if diff := cmp.Diff(a, sample(t, BackendDGXH100, WithMockSeed("node-a"))); diff != "" {
		t.Errorf("same GPUs, different samples (-first +second):\n%s", diff)
	}
	devs := inventory(t, BackendDGXH100, WithMockSeed("node-a"))
	if len(a) != len(devs) {
		t.Fatalf("%d samples for %d GPUs", len(a), len(devs))
	}
	for i, s := range a {
		if s.Index != i || s.UUID != devs[i].UUID || !s.HasUtil || !s.HasMem || !s.HasTemp || !s.HasPower || !s.HasXID ||
			s.UtilPct < 0 || s.UtilPct >= 100 || s.MemUsedMiB >= 50*1024 || s.TempC < 30 || s.TempC >= 70 ||
			s.PowerW < 70 || s.PowerW >= 370 || len(s.XIDs) != 0 || !s.HasNVLink || s.NVLinkUp != 18 || !s.HasPCIe || s.PCIeWidth != s.PCIeMaxWidth {
			t.Errorf("sample %d = %+v; want GPU %s with every reading in its synthetic range", i, s, devs[i].UUID)
		}
	}
}

func TestNoneSamplesNothing(t *testing.T) {
	t.Parallel()
	if s := sample(t, BackendNone); s == nil || len(s) != 0 {
		t.Errorf("none backend sampled %#v, want an empty non-nil list", s)
	}
}

func TestClosedSample(t *testing.T) {
	t.Parallel()
	d, err := Open(context.Background(), BackendDGXH100)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := d.(gpu.Sampler).Sample(context.Background()); err == nil {
		t.Error("Sample after Close succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d2, _ := Open(context.Background(), BackendDGXH100)
	defer d2.Close()
	if _, err := d2.(gpu.Sampler).Sample(ctx); err == nil {
		t.Error("Sample with a cancelled context succeeded")
	}
}

func TestMockHealthFileOverridesReadings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "health.json")
	opts := []Option{WithMockSeed("node-a"), WithMockHealthFile(path)}
	plain := sample(t, BackendDGXH100, opts...) // no file yet: synthetic
	if diff := cmp.Diff(sample(t, BackendDGXH100, WithMockSeed("node-a")), plain); diff != "" {
		t.Fatalf("absent hook file changed readings (-want +got):\n%s", diff)
	}
	body := `{"3": {"temp_c": 90, "util": 1.5, "xid": 94, "mig": "MIG-3a"}, "` + plain[5].UUID + `": {"xid": 79, "ecc_uncorrected": 2},
		"6": {"xids": [48, 94], "ecc_corrected": 7, "row_remap_pending": true, "row_remap_failed": true, "nvlink_up": 17,
		      "nvlink_errors": 12, "pcie_width": 8, "pcie_gen": 3, "throttle": 8}, "7": {"gone": true}}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	got := sample(t, BackendDGXH100, opts...)
	want := slices.Clone(plain)
	want[3].TempC, want[3].UtilPct = 90, 1.5
	want[3].XIDs = []gpu.XIDEvent{{Seq: 1, XID: 94, MIG: "MIG-3a"}} // attributed to a MIG instance
	want[5].XIDs, want[5].ECCUncorrected = []gpu.XIDEvent{{Seq: 2, XID: 79}}, 2
	w6 := &want[6]
	w6.XIDs, w6.ECCCorrected, w6.RowRemapPending, w6.RowRemapFailed, w6.NVLinkUp = []gpu.XIDEvent{{Seq: 3, XID: 48}, {Seq: 4, XID: 94}}, 7, true, true, 17
	w6.NVLinkErrors, w6.PCIeWidth, w6.PCIeGen, w6.Throttle = 12, 8, 3, 8
	want = want[:7] // GPU 7 is gone
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("overridden samples (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(path, []byte(`{"3": {"temperature": 90}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(context.Background(), BackendDGXH100, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.(gpu.Sampler).Sample(context.Background()); err == nil || !strings.Contains(err.Error(), "temp_c") {
		t.Errorf("malformed hook file: err = %v, want one showing the format", err)
	}
}
