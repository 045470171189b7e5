package health

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Throttle-reason bits (NVML's nvmlClocksEventReason*), the ones that
// point at the hardware rather than at the workload or the settings.
const (
	ThrottleHWSlowdown   uint64 = 0x8
	ThrottleSWThermal    uint64 = 0x20
	ThrottleHWThermal    uint64 = 0x40
	ThrottleHWPowerBrake uint64 = 0x80
)

// Reading is one GPU's readings at one instant, as the node agent took
// them. A reading the backend could not take has its Has flag false.
type Reading struct {
	Index int
	UUID  string
	// XIDs are the XID errors seen since the previous reading.
	XIDs []int
	// MIGXIDs are XID errors NVML attributed to one of the GPU's MIG
	// instances, by the instance's UUID: a drain-slice finding takes
	// only that instance out, any other counts as the GPU's own.
	MIGXIDs map[string][]int

	TempC, PowerW, UtilPct     float64
	HasTemp, HasPower, HasUtil bool

	// ECC counts since the driver loaded (volatile).
	ECCCorrected, ECCUncorrected uint64
	HasECC                       bool

	RowRemapPending, RowRemapFailed bool
	// RowsRemapped counts the rows remapped since the GPU was made
	// (correctable and uncorrectable: NVML's GetRemappedRows).
	RowsRemapped uint64
	HasRowRemap  bool

	// NVLinkUp is how many of the GPU's NVLinks are active; NVLinkErrors
	// the sum of their error counters (CRC, replay, recovery).
	NVLinkUp     int
	NVLinkErrors uint64
	HasNVLink    bool

	PCIeWidth, PCIeMaxWidth, PCIeGen, PCIeMaxGen int
	HasPCIe                                      bool

	// Throttle is the clock-event-reason bit mask.
	Throttle    uint64
	HasThrottle bool
}

// Limits are the thresholds of the non-XID checks (node.toml [health]).
type Limits struct {
	// TempMaxC: at or above it for Sustain is a "temp" finding; 0: off.
	TempMaxC float64
	// PowerMaxW: above it for Sustain is a "power" finding; 0: off.
	PowerMaxW float64
	// Sustain is how long temperature, power or a throttle reason must
	// hold before it counts (transients are normal).
	Sustain time.Duration
	// ECCUncorrectedMax: more uncorrected ECC errors than this (since the
	// driver loaded, or since the GPU was last readmitted) is "ecc-dbe";
	// negative: off.
	ECCUncorrectedMax int64
	// ECCCorrectedMax: more corrected errors than this within Window is
	// "ecc-sbe-rate"; 0: off.
	ECCCorrectedMax uint64
	// NVLinkErrorsMax: more NVLink errors than this within Window is
	// "nvlink-errors"; 0: off.
	NVLinkErrorsMax uint64
	// Window is the rate window of the counters; 0 means one hour.
	Window time.Duration
	// ProbeAfter is how long a faulted GPU's readings must stay clean
	// before the agent probes it for readmission; 0 means one minute.
	ProbeAfter time.Duration
	// The trend rule (predictive): the counts of corrected ECC errors
	// and of remapped rows are taken per TrendWindow; over the last
	// TrendWindows windows, corrected errors that grew by half or more
	// each window and reached ECCTrendMin in the last ("ecc-sbe-trend"), or
	// rows remapped in every one of them ("row-remap-trend"), flag a GPU
	// whose memory is wearing out before it fails uncorrectably.
	// TrendWindows below 2 turns the rule off.
	TrendWindow  time.Duration
	TrendWindows int
	ECCTrendMin  uint64
}

// DefaultLimits are the thresholds gpud ships.
func DefaultLimits() Limits {
	return Limits{TempMaxC: 85, Sustain: time.Minute, ECCUncorrectedMax: 0, ECCCorrectedMax: 1000,
		NVLinkErrorsMax: 10000, Window: time.Hour, ProbeAfter: time.Minute,
		TrendWindow: 6 * time.Hour, TrendWindows: 4, ECCTrendMin: 100}
}

// Finding is one thing wrong with one GPU.
type Finding struct {
	GPU int `json:"gpu"`
	// UUID is the GPU's, or the MIG instance's for a finding of one
	// instance (action drain-slice); Parent is then the GPU's.
	UUID   string `json:"uuid"`
	Parent string `json:"parent,omitempty"`
	Code   string `json:"code"`
	Class  Class  `json:"class"`
	Action Action `json:"action"`
	Detail string `json:"detail"`
}

// Reason is how the finding reads as a drain reason: prefixed "gpud:" so
// that a person's reason is never mistaken for (or overwritten by) one.
func (f Finding) Reason() string {
	return fmt.Sprintf("%s%s gpu%d %s", ReasonPrefix, f.Code, f.GPU, f.Detail)
}

// ReasonPrefix starts every reason gpud's health model writes.
const ReasonPrefix = "gpud:"

// Report is what one observation concluded.
type Report struct {
	// New are the findings raised by this observation (not Ignore ones):
	// a drain-worthy finding once per fault, a Log one each time it
	// appears after being absent.
	New []Finding
	// Faults are every GPU's latched drain-worthy findings, by GPU and
	// code: reported with every heartbeat until the GPU is readmitted.
	Faults []Finding
	// ProbeDue lists faulted GPUs (UUIDs) whose readings have been clean
	// for ProbeAfter: probe them, then Readmit or ProbeFailed.
	ProbeDue []string
}

// Model follows a node's GPUs over time. It is not safe for concurrent
// use: the agent's health loop owns it.
type Model struct {
	triage Triage
	limits Limits
	gpus   map[string]*gpuState
}

type gpuState struct {
	index int
	// parent is the GPU's UUID when this is a MIG instance (it has no
	// readings of its own: only the XIDs NVML attributes to it).
	parent string
	// over: since when a sustained condition has held, by code.
	over map[string]time.Time
	// Counter baselines: the rate window's start and the counts then.
	windowStart     time.Time
	sbeBase, nvBase uint64
	// dbeBase: uncorrected errors that no longer count (those of a fault
	// already raised, or from before the last readmission).
	dbeBase uint64
	// dbeLast is the last uncorrected count read (for gates).
	dbeLast  uint64
	hasBase  bool
	linksMax int
	// faults are the latched drain-worthy findings by code.
	faults map[string]Finding
	// logged are the Log findings present in the previous observation.
	logged map[string]bool
	// cleanSince: while faulted, since when nothing drain-worthy showed.
	cleanSince time.Time
	// The trend rule's windows: the current one's start and the counts
	// then, and the closed windows' counts (oldest first, at most
	// TrendWindows).
	trendStart          time.Time
	trendSBE, trendRows uint64
	sbePer, rowsPer     []uint64
	// trendNow are the trend findings of the last closed windows: present
	// in every reading until the next window closes without them, so a
	// GPU drained for a trend is not clean (nor probed) while it lasts.
	trendNow [][2]string
}

// New returns a model of the GPUs in inventory (index → UUID).
func New(t Triage, l Limits, inventory map[int]string) *Model {
	if l.Window <= 0 {
		l.Window = time.Hour
	}
	if l.ProbeAfter <= 0 {
		l.ProbeAfter = time.Minute
	}
	m := &Model{triage: t, limits: l, gpus: map[string]*gpuState{}}
	for i, u := range inventory {
		m.gpus[u] = newState(i)
	}
	return m
}

func newState(index int) *gpuState {
	return &gpuState{index: index, over: map[string]time.Time{}, faults: map[string]Finding{}, logged: map[string]bool{}}
}

// Observe takes one sample of the node's GPUs: readings of the GPUs NVML
// still lists. An inventory GPU without a reading has vanished.
func (m *Model) Observe(now time.Time, readings []Reading) Report {
	var rep Report
	seen := map[string]bool{}
	sliceFs := map[string][]Finding{}
	for _, r := range readings {
		seen[r.UUID] = true
		st := m.gpus[r.UUID]
		if st == nil { // a GPU the inventory did not list (hot-added): follow it too
			st = newState(r.Index)
			m.gpus[r.UUID] = st
		}
		var own []Finding
		for _, f := range m.judge(st, r, now) {
			if f.Parent == "" {
				own = append(own, f)
				continue
			}
			m.sliceState(f)
			sliceFs[f.UUID] = append(sliceFs[f.UUID], f)
		}
		m.update(&rep, st, now, own)
	}
	// A MIG instance is clean while no XID is attributed to it and its
	// GPU is still listed (a GPU gone is the GPU's fault, not the slice's).
	for _, uuid := range slices.Sorted(maps.Keys(m.gpus)) {
		if st := m.gpus[uuid]; st.parent != "" && seen[st.parent] {
			m.update(&rep, st, now, sliceFs[uuid])
		}
	}
	for _, uuid := range slices.Sorted(maps.Keys(m.gpus)) {
		if seen[uuid] || m.gpus[uuid].parent != "" {
			continue
		}
		st := m.gpus[uuid]
		m.update(&rep, st, now, []Finding{m.finding(st.index, uuid, CodeGPUMissing, "GPU no longer listed by NVML")})
	}
	rep.Faults = m.Faults()
	for _, uuid := range slices.Sorted(maps.Keys(m.gpus)) {
		st := m.gpus[uuid]
		if len(st.faults) > 0 && !st.cleanSince.IsZero() && now.Sub(st.cleanSince) >= m.limits.ProbeAfter {
			rep.ProbeDue = append(rep.ProbeDue, uuid)
		}
	}
	slices.SortFunc(rep.New, byGPU)
	return rep
}

// sliceState returns the state of the MIG instance f names, made on
// first sight.
func (m *Model) sliceState(f Finding) *gpuState {
	st := m.gpus[f.UUID]
	if st == nil {
		st = newState(f.GPU)
		m.gpus[f.UUID] = st
	}
	st.index, st.parent = f.GPU, f.Parent
	return st
}

// Parent returns the GPU's UUID when uuid is a MIG instance the model
// follows, else "".
func (m *Model) Parent(uuid string) string {
	if st := m.gpus[uuid]; st != nil {
		return st.parent
	}
	return ""
}

func byGPU(a, b Finding) int {
	return cmp.Or(cmp.Compare(a.GPU, b.GPU), strings.Compare(a.UUID, b.UUID), strings.Compare(a.Code, b.Code))
}

// Faults returns every GPU's latched faults, by GPU and code.
func (m *Model) Faults() []Finding {
	var out []Finding
	for _, st := range m.gpus {
		for _, f := range st.faults {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, byGPU)
	return out
}

// update latches the drain-worthy findings of one GPU, notes the Log
// ones that are new, and tracks how long a faulted GPU has been clean.
func (m *Model) update(rep *Report, st *gpuState, now time.Time, present []Finding) {
	clean := true
	logged := map[string]bool{}
	for _, f := range present {
		switch {
		case f.Action.Drains():
			clean = false
			if _, ok := st.faults[f.Code]; !ok {
				st.faults[f.Code] = f
				rep.New = append(rep.New, f)
			}
		case f.Action == Log:
			logged[f.Code] = true
			if !st.logged[f.Code] {
				rep.New = append(rep.New, f)
			}
		}
	}
	st.logged = logged
	switch {
	case len(st.faults) == 0 || !clean:
		st.cleanSince = time.Time{}
	case st.cleanSince.IsZero():
		st.cleanSince = now
	}
}

func (m *Model) finding(index int, uuid, code, detail string) Finding {
	r := m.triage.Lookup(code)
	return Finding{GPU: index, UUID: uuid, Code: code, Class: r.Class, Action: r.Action, Detail: detail}
}

// judge returns what is wrong with one reading now (Ignore findings left
// out), updating the GPU's sustained conditions and counter windows.
func (m *Model) judge(st *gpuState, r Reading, now time.Time) []Finding {
	l := m.limits
	st.index = r.Index
	var out []Finding
	add := func(code, detail string) {
		if f := m.finding(r.Index, r.UUID, code, detail); f.Action != Ignore {
			out = append(out, f)
		}
	}
	sustained := func(code string, over bool, detail string) {
		if !over {
			delete(st.over, code)
			return
		}
		since, ok := st.over[code]
		if !ok {
			since = now
			st.over[code] = now
		}
		if now.Sub(since) >= l.Sustain {
			add(code, fmt.Sprintf("%s for %s", detail, l.Sustain))
		}
	}
	for _, x := range slices.Compact(slices.Sorted(slices.Values(r.XIDs))) {
		add(XIDCode(x), "XID "+fmt.Sprint(x)+" "+m.triage.Lookup(XIDCode(x)).What)
	}
	for _, mig := range slices.Sorted(maps.Keys(r.MIGXIDs)) {
		for _, x := range slices.Compact(slices.Sorted(slices.Values(r.MIGXIDs[mig]))) {
			f := m.finding(r.Index, r.UUID, XIDCode(x), fmt.Sprintf("XID %d %s on MIG instance %s", x, m.triage.Lookup(XIDCode(x)).What, mig))
			if f.Action == DrainSlice && mig != r.UUID {
				f.UUID, f.Parent = mig, r.UUID
			}
			if f.Action != Ignore {
				out = append(out, f)
			}
		}
	}
	if l.TempMaxC > 0 && r.HasTemp {
		sustained(CodeTemp, r.TempC >= l.TempMaxC, fmt.Sprintf("temperature %.0fC at or above %.0fC", r.TempC, l.TempMaxC))
	}
	if l.PowerMaxW > 0 && r.HasPower {
		sustained(CodePower, r.PowerW > l.PowerMaxW, fmt.Sprintf("power %.0fW above %.0fW", r.PowerW, l.PowerMaxW))
	}
	if r.HasThrottle {
		for _, t := range []struct {
			bit  uint64
			code string
		}{{ThrottleHWSlowdown, CodeThrottleHW}, {ThrottleHWThermal, CodeThrottleHWTherm}, {ThrottleHWPowerBrake, CodeThrottleBrake}, {ThrottleSWThermal, CodeThrottleSWTherm}} {
			sustained(t.code, r.Throttle&t.bit != 0, "clocks throttled ("+t.code+")")
		}
	}
	if r.HasECC || r.HasNVLink {
		if !st.hasBase {
			st.hasBase, st.windowStart, st.sbeBase, st.nvBase = true, now, r.ECCCorrected, r.NVLinkErrors
		} else if now.Sub(st.windowStart) >= l.Window {
			st.windowStart, st.sbeBase, st.nvBase = now, r.ECCCorrected, r.NVLinkErrors
		}
	}
	if r.HasECC {
		st.dbeLast = r.ECCUncorrected
		if l.ECCUncorrectedMax >= 0 && r.ECCUncorrected > st.dbeBase && r.ECCUncorrected-st.dbeBase > uint64(l.ECCUncorrectedMax) {
			add(CodeECCDBE, fmt.Sprintf("%d uncorrected ECC errors (limit %d)", r.ECCUncorrected-st.dbeBase, l.ECCUncorrectedMax))
			// Counted once: the fault is latched; only more errors
			// count again (a readmitted GPU starts afresh).
			st.dbeBase = r.ECCUncorrected
		}
		if l.ECCCorrectedMax > 0 && r.ECCCorrected > st.sbeBase && r.ECCCorrected-st.sbeBase > l.ECCCorrectedMax {
			add(CodeECCSBERate, fmt.Sprintf("%d corrected ECC errors within %s (limit %d)", r.ECCCorrected-st.sbeBase, l.Window, l.ECCCorrectedMax))
		}
	}
	for _, f := range m.trend(st, r, now) {
		add(f[0], f[1])
	}
	if r.HasRowRemap {
		if r.RowRemapFailed {
			add(CodeRowRemapFailed, "row remapping failed")
		}
		if r.RowRemapPending {
			add(CodeRowRemapPending, "row remapping pending")
		}
	}
	if r.HasNVLink {
		st.linksMax = max(st.linksMax, r.NVLinkUp)
		if r.NVLinkUp < st.linksMax {
			add(CodeNVLinkDown, fmt.Sprintf("%d of %d NVLinks up", r.NVLinkUp, st.linksMax))
		}
		if l.NVLinkErrorsMax > 0 && r.NVLinkErrors > st.nvBase && r.NVLinkErrors-st.nvBase > l.NVLinkErrorsMax {
			add(CodeNVLinkErrors, fmt.Sprintf("%d NVLink errors within %s (limit %d)", r.NVLinkErrors-st.nvBase, l.Window, l.NVLinkErrorsMax))
		}
	}
	if r.HasPCIe {
		if r.PCIeMaxWidth > 0 && r.PCIeWidth < r.PCIeMaxWidth {
			add(CodePCIeWidth, fmt.Sprintf("PCIe link x%d of x%d", r.PCIeWidth, r.PCIeMaxWidth))
		}
		// An idle GPU lowers its link generation to save power: only a
		// busy GPU's generation says something about the link.
		sustained(CodePCIeGen, r.PCIeMaxGen > 0 && r.PCIeGen < r.PCIeMaxGen && r.HasUtil && r.UtilPct >= 50,
			fmt.Sprintf("PCIe gen%d of gen%d under load", r.PCIeGen, r.PCIeMaxGen))
	}
	return out
}

// trend closes the trend rule's window when due and returns its findings
// (code, detail): those of the last closed windows.
func (m *Model) trend(st *gpuState, r Reading, now time.Time) [][2]string {
	l := m.limits
	if l.TrendWindows < 2 || l.TrendWindow <= 0 || !r.HasECC {
		return nil
	}
	if st.trendStart.IsZero() {
		st.trendStart, st.trendSBE, st.trendRows = now, r.ECCCorrected, r.RowsRemapped
		return nil
	}
	if now.Sub(st.trendStart) < l.TrendWindow {
		return st.trendNow
	}
	// A counter that went down (the driver reloaded) starts afresh.
	sbe := r.ECCCorrected - min(st.trendSBE, r.ECCCorrected)
	rows := r.RowsRemapped - min(st.trendRows, r.RowsRemapped)
	push := func(l []uint64, v uint64) []uint64 {
		l = append(l, v)
		return l[max(len(l)-m.limits.TrendWindows, 0):]
	}
	st.sbePer, st.rowsPer = push(st.sbePer, sbe), push(st.rowsPer, rows)
	st.trendStart, st.trendSBE, st.trendRows = now, r.ECCCorrected, r.RowsRemapped
	st.trendNow = nil
	if len(st.sbePer) < l.TrendWindows {
		return nil
	}
	var out [][2]string
	rising := st.sbePer[len(st.sbePer)-1] >= max(l.ECCTrendMin, 1)
	for i := 1; i < len(st.sbePer) && rising; i++ {
		rising = st.sbePer[i-1] > 0 && 2*st.sbePer[i] >= 3*st.sbePer[i-1] // up by half or more
	}
	if rising {
		out = append(out, [2]string{CodeECCTrend, fmt.Sprintf("corrected ECC errors per %s rising: %s", l.TrendWindow, counts(st.sbePer))})
	}
	if r.HasRowRemap && !slices.Contains(st.rowsPer, 0) {
		out = append(out, [2]string{CodeRowRemapTrend, fmt.Sprintf("rows remapped in each of the last %d windows of %s: %s", l.TrendWindows, l.TrendWindow, counts(st.rowsPer))})
	}
	st.trendNow = out
	return out
}

func counts(l []uint64) string {
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ", ")
}

// Gate is the quick check before a job starts on GPUs: it fails a GPU the
// model holds faulted, and a fresh reading that shows at once what a
// sample would latch (an XID, failed or pending row remapping, an NVLink
// down, uncorrected errors since the last sample, a vanished GPU). It
// does not change the model. want lists the UUIDs to check.
func (m *Model) Gate(want []string, readings []Reading) []Finding {
	var out []Finding
	by := map[string]Reading{}
	for _, r := range readings {
		by[r.UUID] = r
	}
	for _, uuid := range want {
		st := m.gpus[uuid]
		index := -1
		if st != nil {
			index = st.index
			for _, code := range slices.Sorted(maps.Keys(st.faults)) {
				out = append(out, st.faults[code])
			}
			if len(st.faults) > 0 {
				continue
			}
		}
		r, ok := by[uuid]
		if !ok {
			out = append(out, m.finding(index, uuid, CodeGPUMissing, "GPU no longer listed by NVML"))
			continue
		}
		add := func(code, detail string) {
			if f := m.finding(r.Index, uuid, code, detail); f.Action.Drains() {
				out = append(out, f)
			}
		}
		for _, x := range r.XIDs {
			add(XIDCode(x), "XID "+fmt.Sprint(x)+" "+m.triage.Lookup(XIDCode(x)).What)
		}
		// An XID of one MIG instance fails the GPU's gate only when it is
		// not the instance's alone (drain-slice: the sample takes it).
		for _, mig := range slices.Sorted(maps.Keys(r.MIGXIDs)) {
			for _, x := range r.MIGXIDs[mig] {
				if m.triage.Lookup(XIDCode(x)).Action != DrainSlice {
					add(XIDCode(x), fmt.Sprintf("XID %d %s on MIG instance %s", x, m.triage.Lookup(XIDCode(x)).What, mig))
				}
			}
		}
		if r.HasRowRemap && r.RowRemapFailed {
			add(CodeRowRemapFailed, "row remapping failed")
		}
		if r.HasRowRemap && r.RowRemapPending {
			add(CodeRowRemapPending, "row remapping pending")
		}
		if st != nil && r.HasNVLink && r.NVLinkUp < st.linksMax {
			add(CodeNVLinkDown, fmt.Sprintf("%d of %d NVLinks up", r.NVLinkUp, st.linksMax))
		}
		if st != nil && r.HasECC && m.limits.ECCUncorrectedMax >= 0 && r.ECCUncorrected > st.dbeLast {
			add(CodeECCDBE, fmt.Sprintf("%d new uncorrected ECC errors", r.ECCUncorrected-st.dbeLast))
		}
	}
	return out
}

// Readmit clears a GPU's faults after a clean probe: it schedules again,
// and its counters start afresh.
func (m *Model) Readmit(uuid string) []Finding {
	st := m.gpus[uuid]
	if st == nil {
		return nil
	}
	cleared := slices.Collect(maps.Values(st.faults))
	slices.SortFunc(cleared, func(a, b Finding) int { return strings.Compare(a.Code, b.Code) })
	st.faults, st.cleanSince, st.over = map[string]Finding{}, time.Time{}, map[string]time.Time{}
	st.dbeBase = st.dbeLast
	st.hasBase = false
	return cleared
}

// ProbeFailed records a failed readmission probe: the GPU stays out, and
// is probed again only after another clean ProbeAfter.
func (m *Model) ProbeFailed(now time.Time, uuid, detail string) Finding {
	st := m.gpus[uuid]
	if st == nil {
		st = newState(-1)
		m.gpus[uuid] = st
	}
	f := m.finding(st.index, uuid, CodeProbeFailed, detail)
	st.faults[CodeProbeFailed] = f
	st.cleanSince = now
	return f
}

// Latch records f, found outside a sample (by a job's start gate), as a
// fault of its GPU, as a sample would have: it is reported with every
// heartbeat until a clean probe readmits the GPU. It reports whether f is
// new (a GPU already latched with f's code keeps the first).
func (m *Model) Latch(f Finding) bool {
	st := m.gpus[f.UUID]
	if st == nil {
		st = newState(f.GPU)
		m.gpus[f.UUID] = st
	}
	if f.Parent != "" {
		st.parent = f.Parent
	}
	if _, ok := st.faults[f.Code]; ok {
		return false
	}
	st.faults[f.Code] = f
	st.cleanSince = time.Time{}
	return true
}

// DiagFailed records a failed background diagnostic of a GPU in service:
// a diag-failed fault, latched like a sample's (probed for readmission
// after ProbeAfter of clean readings).
func (m *Model) DiagFailed(index int, uuid, detail string) Finding {
	f := m.finding(index, uuid, CodeDiagFailed, detail)
	m.Latch(f)
	return f
}

// Faulted reports whether the GPU has latched faults.
func (m *Model) Faulted(uuid string) bool {
	st := m.gpus[uuid]
	return st != nil && len(st.faults) > 0
}

// Hold latches f on its GPU unless the GPU already has faults: how an
// agent that restarted learns of a GPU the controller still holds out
// (so it is probed before it comes back, never readmitted by forgetting).
func (m *Model) Hold(f Finding) {
	st := m.gpus[f.UUID]
	if st == nil {
		st = newState(f.GPU)
		m.gpus[f.UUID] = st
	}
	if f.Parent != "" {
		st.parent = f.Parent
	}
	if len(st.faults) == 0 {
		st.faults[f.Code] = f
	}
}

// ParseReason splits a reason Finding.Reason wrote into its code, GPU
// index and detail; ok is false for any other text (a person's reason).
func ParseReason(s string) (code string, gpu int, detail string, ok bool) {
	rest, ok := strings.CutPrefix(s, ReasonPrefix)
	if !ok {
		return "", 0, "", false
	}
	code, rest, _ = strings.Cut(rest, " ")
	idx, detail, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(strings.TrimPrefix(idx, "gpu"))
	if err != nil || !strings.HasPrefix(idx, "gpu") || !ValidCode(code) && code != "held" {
		return "", 0, "", false
	}
	return code, n, detail, true
}
