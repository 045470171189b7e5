package health

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// healthy is a reading of a sound H100 at work.
func healthy(i int) Reading {
	return Reading{Index: i, UUID: uuidOf(i), TempC: 60, PowerW: 400, UtilPct: 90, HasTemp: true, HasPower: true, HasUtil: true,
		HasECC: true, HasRowRemap: true, NVLinkUp: 18, HasNVLink: true,
		PCIeWidth: 16, PCIeMaxWidth: 16, PCIeGen: 5, PCIeMaxGen: 5, HasPCIe: true, HasThrottle: true}
}

func uuidOf(i int) string { return "GPU-" + string(rune('a'+i)) }

func inventory(n int) map[int]string {
	m := map[int]string{}
	for i := range n {
		m[i] = uuidOf(i)
	}
	return m
}

func node(n int, edit func(i int, r *Reading)) []Reading {
	var out []Reading
	for i := range n {
		r := healthy(i)
		if edit != nil {
			edit(i, &r)
		}
		if r.UUID != "" {
			out = append(out, r)
		}
	}
	return out
}

func codes(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code+"@"+string(rune('0'+f.GPU))+":"+string(f.Action))
	}
	return out
}

// TestFindings: one faulty reading of GPU 3 (after a healthy first
// sample) raises exactly the finding its code's rule says, with the
// rule's action.
func TestFindings(t *testing.T) {
	t.Parallel()
	l := DefaultLimits()
	l.Sustain = 2 * time.Second
	tests := []struct {
		name string
		edit func(r *Reading)
		// held: readings repeat this long (sustained conditions)
		held time.Duration
		want []string
	}{
		{name: "xid 79 drains the GPU", edit: func(r *Reading) { r.XIDs = []int{79} }, want: []string{"xid79@3:drain-gpu"}},
		{name: "xid 13 is the application's", edit: func(r *Reading) { r.XIDs = []int{13} }},
		{name: "unknown xid is logged", edit: func(r *Reading) { r.XIDs = []int{999} }, want: []string{"xid999@3:log"}},
		{name: "xid 143 degraded, logged", edit: func(r *Reading) { r.XIDs = []int{143} }, want: []string{"xid143@3:log"}},
		{name: "double-bit ECC", edit: func(r *Reading) { r.ECCUncorrected = 1 }, want: []string{"ecc-dbe@3:drain-gpu"}},
		{name: "single-bit ECC under the rate", edit: func(r *Reading) { r.ECCCorrected = 1000 }},
		{name: "single-bit ECC over the rate", edit: func(r *Reading) { r.ECCCorrected = 1001 }, want: []string{"ecc-sbe-rate@3:log"}},
		{name: "row remap pending", edit: func(r *Reading) { r.RowRemapPending = true }, want: []string{"row-remap-pending@3:drain-gpu"}},
		{name: "row remap failed", edit: func(r *Reading) { r.RowRemapFailed = true }, want: []string{"row-remap-failed@3:drain-gpu"}},
		{name: "nvlink down", edit: func(r *Reading) { r.NVLinkUp = 17 }, want: []string{"nvlink-down@3:drain-gpu"}},
		{name: "nvlink errors over the rate", edit: func(r *Reading) { r.NVLinkErrors = 10001 }, want: []string{"nvlink-errors@3:log"}},
		{name: "pcie narrower", edit: func(r *Reading) { r.PCIeWidth = 8 }, want: []string{"pcie-width@3:log"}},
		{name: "pcie gen low when idle is power saving", edit: func(r *Reading) { r.PCIeGen, r.UtilPct = 1, 0 }, held: 10 * time.Second},
		{name: "pcie gen low under load", edit: func(r *Reading) { r.PCIeGen = 3 }, held: 2 * time.Second, want: []string{"pcie-gen@3:log"}},
		{name: "hw slowdown sustained", edit: func(r *Reading) { r.Throttle = ThrottleHWSlowdown }, held: 2 * time.Second, want: []string{"throttle-hw-slowdown@3:log"}},
		{name: "hw slowdown brief", edit: func(r *Reading) { r.Throttle = ThrottleHWSlowdown }, held: time.Second},
		{name: "power brake", edit: func(r *Reading) { r.Throttle = ThrottleHWPowerBrake | ThrottleHWThermal }, held: 3 * time.Second,
			want: []string{"throttle-hw-thermal@3:log", "throttle-power-brake@3:log"}},
		{name: "sw thermal is ignored", edit: func(r *Reading) { r.Throttle = ThrottleSWThermal }, held: 3 * time.Second},
		{name: "hot, sustained", edit: func(r *Reading) { r.TempC = 90 }, held: 2 * time.Second, want: []string{"temp@3:drain-gpu"}},
		{name: "hot, briefly", edit: func(r *Reading) { r.TempC = 90 }, held: time.Second},
		{name: "vanished", edit: func(r *Reading) { r.UUID = "" }, want: []string{"gpu-missing@3:drain-gpu"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := New(DefaultTriage(), l, inventory(8))
			if rep := m.Observe(t0, node(8, nil)); len(rep.New)+len(rep.Faults) > 0 {
				t.Fatalf("healthy node: %v", rep)
			}
			var got []string
			for at := time.Duration(0); at <= tc.held; at += time.Second {
				rep := m.Observe(t0.Add(time.Second+at), node(8, func(i int, r *Reading) {
					if i == 3 {
						tc.edit(r)
					}
				}))
				got = append(got, codes(rep.New)...)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFaultLatchesUntilProbe: XID 79 on GPU 3 latches until its readings
// are clean for ProbeAfter; a failed probe waits another ProbeAfter; a
// clean one readmits and the next XID faults afresh.
func TestFaultLatchesUntilProbe(t *testing.T) {
	t.Parallel()
	l := DefaultLimits()
	l.ProbeAfter = 5 * time.Second
	m := New(DefaultTriage(), l, inventory(8))
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	xid := func(i int, r *Reading) {
		if i == 3 {
			r.XIDs = []int{79}
		}
	}
	rep := m.Observe(at(0), node(8, xid))
	if got := codes(rep.New); len(got) != 1 || got[0] != "xid79@3:drain-gpu" {
		t.Fatalf("new findings %v, want xid79 on GPU 3", got)
	}
	if f := rep.Faults[0]; !strings.HasPrefix(f.Reason(), "gpud:xid79 gpu3 XID 79 GPU has fallen off the bus") {
		t.Errorf("reason %q", f.Reason())
	}
	rep = m.Observe(at(1), node(8, xid))
	if len(rep.New) != 0 || len(rep.Faults) != 1 {
		t.Fatalf("repeat XID: new %v faults %v, want no new finding and the fault kept", rep.New, rep.Faults)
	}
	for s := 2; s < 7; s++ { // clean from 2s: probe due at 7s
		if rep = m.Observe(at(s), node(8, nil)); len(rep.ProbeDue) != 0 || len(rep.Faults) != 1 {
			t.Fatalf("at %ds: probe due %v faults %v, want still latched and no probe yet", s, rep.ProbeDue, rep.Faults)
		}
	}
	if rep = m.Observe(at(7), node(8, nil)); len(rep.ProbeDue) != 1 || rep.ProbeDue[0] != uuidOf(3) {
		t.Fatalf("probe due %v, want GPU 3", rep.ProbeDue)
	}
	m.ProbeFailed(at(7), uuidOf(3), "dcgmi diag -r 1 failed")
	if rep = m.Observe(at(8), node(8, nil)); len(rep.ProbeDue) != 0 || len(rep.Faults) != 2 {
		t.Fatalf("after a failed probe: due %v faults %v", rep.ProbeDue, codes(rep.Faults))
	}
	if rep = m.Observe(at(12), node(8, nil)); len(rep.ProbeDue) != 1 {
		t.Fatalf("probe due again %v, want GPU 3 after another 5s clean", rep.ProbeDue)
	}
	cleared := m.Readmit(uuidOf(3))
	if diff := cmp.Diff([]string{"probe-failed@3:drain-gpu", "xid79@3:drain-gpu"}, codes(cleared)); diff != "" {
		t.Errorf("cleared (-want +got):\n%s", diff)
	}
	if rep = m.Observe(at(13), node(8, nil)); len(rep.Faults)+len(rep.ProbeDue)+len(rep.New) != 0 {
		t.Fatalf("after readmission: %+v", rep)
	}
	if rep = m.Observe(at(14), node(8, xid)); len(rep.New) != 1 {
		t.Fatalf("a fresh XID after readmission: new %v", rep.New)
	}
}

// TestDBECountsOnceAndAfresh: uncorrected errors raise one fault; the
// same count after readmission is not a new fault, one more error is.
func TestDBECountsOnceAndAfresh(t *testing.T) {
	t.Parallel()
	l := DefaultLimits()
	l.ProbeAfter = time.Second
	m := New(DefaultTriage(), l, inventory(1))
	dbe := func(n uint64) []Reading { return node(1, func(_ int, r *Reading) { r.ECCUncorrected = n }) }
	if rep := m.Observe(t0, dbe(2)); len(rep.New) != 1 || rep.New[0].Code != CodeECCDBE {
		t.Fatalf("2 DBEs at start: %v", rep.New)
	}
	m.Observe(t0.Add(time.Second), dbe(2))
	if rep := m.Observe(t0.Add(2*time.Second), dbe(2)); len(rep.ProbeDue) != 1 {
		t.Fatalf("no further errors: probe due %v", rep.ProbeDue)
	}
	m.Readmit(uuidOf(0))
	if rep := m.Observe(t0.Add(3*time.Second), dbe(2)); len(rep.Faults) != 0 {
		t.Fatalf("readmitted with the same count: %v", rep.Faults)
	}
	if g := m.Gate([]string{uuidOf(0)}, dbe(3)); len(g) != 1 || g[0].Code != CodeECCDBE {
		t.Errorf("gate with a new DBE: %v", g)
	}
	if rep := m.Observe(t0.Add(4*time.Second), dbe(3)); len(rep.New) != 1 {
		t.Fatalf("one more DBE: %v", rep.New)
	}
}

// TestGate: faulted GPUs and instant faults fail the gate; the healthy
// ones pass.
func TestGate(t *testing.T) {
	t.Parallel()
	m := New(DefaultTriage(), DefaultLimits(), inventory(8))
	m.Observe(t0, node(8, nil))
	m.Observe(t0.Add(time.Second), node(8, func(i int, r *Reading) {
		if i == 1 {
			r.XIDs = []int{48}
		}
	}))
	fresh := node(8, func(i int, r *Reading) {
		switch i {
		case 2:
			r.RowRemapFailed = true
		case 4:
			r.NVLinkUp = 12
		case 5:
			r.UUID = ""
		case 6:
			r.XIDs = []int{13} // the application's: passes
		}
	})
	got := codes(m.Gate([]string{uuidOf(0), uuidOf(1), uuidOf(2), uuidOf(4), uuidOf(5), uuidOf(6), uuidOf(7)}, fresh))
	want := []string{"xid48@1:drain-gpu", "row-remap-failed@2:drain-gpu", "nvlink-down@4:drain-gpu", "gpu-missing@5:drain-gpu"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gate (-want +got):\n%s", diff)
	}
}

// TestLatchFromGate: a finding the start gate latched is a fault like a
// sample's: the next sample that sees the same XID raises nothing new,
// and the GPU is probed only after ProbeAfter of clean readings.
func TestLatchFromGate(t *testing.T) {
	t.Parallel()
	l := DefaultLimits()
	m := New(DefaultTriage(), l, inventory(2))
	m.Observe(t0, node(2, nil))
	xid := node(2, func(i int, r *Reading) {
		if i == 1 {
			r.XIDs = []int{79}
		}
	})
	fs := m.Gate([]string{uuidOf(1)}, xid)
	if len(fs) != 1 || !m.Latch(fs[0]) || m.Latch(fs[0]) {
		t.Fatalf("gate %v: want one finding, new when latched the first time only", codes(fs))
	}
	rep := m.Observe(t0.Add(time.Second), xid)
	if len(rep.New) != 0 || len(rep.Faults) != 1 || rep.Faults[0].Code != "xid79" {
		t.Fatalf("sample after the gate: new %v faults %v; want nothing new and xid79 latched", codes(rep.New), codes(rep.Faults))
	}
	m.Observe(t0.Add(2*time.Second), node(2, nil))
	if rep := m.Observe(t0.Add(2*time.Second+l.ProbeAfter), node(2, nil)); len(rep.ProbeDue) != 1 || rep.ProbeDue[0] != uuidOf(1) {
		t.Errorf("probe due %v after %s clean, want GPU 1", rep.ProbeDue, l.ProbeAfter)
	}
}

func TestParseTriage(t *testing.T) {
	t.Parallel()
	got, err := ParseTriage(DefaultTriage(), map[string]string{"xid13": "fatal", "xid79": "fatal:drain-node", "row-remap-pending": "degraded:log", "xid500": "info"})
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[string]Rule{
		"xid13":             {Fatal, DrainGPU, "graphics engine exception (usually the application)"},
		"xid79":             {Fatal, DrainNode, "GPU has fallen off the bus"},
		"row-remap-pending": {Degraded, Log, "row remapping pending: the GPU needs a reset"},
		"xid500":            {Info, Ignore, "XID not in the triage table"},
		"xid48":             {Fatal, DrainGPU, "double-bit ECC error"},
		"xid7777":           UnknownXID,
	} {
		if diff := cmp.Diff(want, got.Lookup(code)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", code, diff)
		}
	}
	_, err = ParseTriage(DefaultTriage(), map[string]string{"xid0": "info", "pcie": "info", "xid5": "bad", "xid6": "fatal:reboot"})
	for _, want := range []string{"xid0: unknown code", "pcie: unknown code", `unknown class "bad"`, `unknown action "reboot"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}

func TestParseReason(t *testing.T) {
	t.Parallel()
	f := Finding{GPU: 3, Code: "xid79", Detail: "XID 79 GPU has fallen off the bus"}
	code, gpu, detail, ok := ParseReason(f.Reason())
	if !ok || code != "xid79" || gpu != 3 || detail != f.Detail {
		t.Errorf("ParseReason(%q) = %q %d %q %v", f.Reason(), code, gpu, detail, ok)
	}
	for _, s := range []string{"bad fan, RMA ticket 42", "gpud:", "gpud:nonsense gpu3 x", "gpud:xid79 gpux y"} {
		if _, _, _, ok := ParseReason(s); ok {
			t.Errorf("ParseReason(%q) ok, want a person's reason", s)
		}
	}
}
