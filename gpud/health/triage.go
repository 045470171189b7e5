package health

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Class is how bad a finding is.
type Class string

// Classes of findings.
const (
	// Fatal: the GPU (or node) cannot be trusted with work.
	Fatal Class = "fatal"
	// Degraded: the GPU works but worse, or is likely to fail.
	Degraded Class = "degraded"
	// Info: worth a line in the history at most (application-caused XIDs).
	Info Class = "info"
)

// Action is what the controller does about a finding.
type Action string

// Actions, from the strongest.
const (
	// DrainNode takes the whole node out of service: the fault is
	// node-wide (a site rule, e.g. an NVSwitch XID on a baseboard).
	DrainNode Action = "drain-node"
	// DrainGPU takes only the GPU out of service; its jobs are
	// checkpointed (when they checkpoint) and requeued elsewhere, while
	// the node's other GPUs keep scheduling.
	DrainGPU Action = "drain-gpu"
	// DrainSlice takes only the MIG instance NVML attributed the finding
	// to out of service (the GPU's other instances keep their jobs and
	// keep scheduling); a finding of a whole GPU (no MIG attribution) is
	// drain-gpu.
	DrainSlice Action = "drain-slice"
	// Log records the finding in the GPU's history; nothing moves.
	Log Action = "log"
	// Ignore drops the finding.
	Ignore Action = "ignore"
)

// Drains reports whether the action takes something out of service.
func (a Action) Drains() bool { return a == DrainNode || a == DrainGPU || a == DrainSlice }

// defaultAction is each class's action when a rule names only the class.
var defaultAction = map[Class]Action{Fatal: DrainGPU, Degraded: Log, Info: Ignore}

// Rule is one line of the triage table.
type Rule struct {
	Class  Class
	Action Action
	// What says in words what the code means ("fell off the bus").
	What string
}

// Codes of the findings that are not XIDs ("xid<N>" are the rest).
const (
	CodeTemp            = "temp"
	CodePower           = "power"
	CodeECCDBE          = "ecc-dbe"
	CodeECCSBERate      = "ecc-sbe-rate"
	CodeRowRemapPending = "row-remap-pending"
	CodeRowRemapFailed  = "row-remap-failed"
	CodeNVLinkDown      = "nvlink-down"
	CodeNVLinkErrors    = "nvlink-errors"
	CodePCIeWidth       = "pcie-width"
	CodePCIeGen         = "pcie-gen"
	CodeThrottleHW      = "throttle-hw-slowdown"
	CodeThrottleHWTherm = "throttle-hw-thermal"
	CodeThrottleBrake   = "throttle-power-brake"
	CodeThrottleSWTherm = "throttle-sw-thermal"
	CodeGPUMissing      = "gpu-missing"
	CodeProbeFailed     = "probe-failed"
	CodeDiagFailed      = "diag-failed"
	CodeECCTrend        = "ecc-sbe-trend"
	CodeRowRemapTrend   = "row-remap-trend"
)

// XIDCode is the triage code of XID n ("xid79").
func XIDCode(n int) string { return "xid" + strconv.Itoa(n) }

// Triage maps a finding's code to its class and action. Codes not in the
// table fall back to UnknownXID (for XIDs) or to the defaults.
type Triage map[string]Rule

// UnknownXID is the rule of an XID the table does not list: recorded, not
// drained (an unknown XID proves no fault, and draining on every XID
// would take GPUs out for application bugs).
var UnknownXID = Rule{Class: Degraded, Action: Log, What: "XID not in the triage table"}

// DefaultTriage is the table gpud ships: NVIDIA's XID catalogue as sites
// triage it (unhealthy: 48, 61-64, 74, 79, 92, 94, 95, GSP 119/120;
// degraded: 140, 143; application-caused: 13, 31, 43, 45) plus the
// non-XID checks.
func DefaultTriage() Triage {
	t := Triage{
		CodeTemp:            {Fatal, DrainGPU, "temperature over the limit"},
		CodePower:           {Fatal, DrainGPU, "board power over the limit"},
		CodeECCDBE:          {Fatal, DrainGPU, "uncorrected (double-bit) ECC errors"},
		CodeECCSBERate:      {Degraded, Log, "corrected (single-bit) ECC errors above the rate limit"},
		CodeRowRemapPending: {Degraded, DrainGPU, "row remapping pending: the GPU needs a reset"},
		CodeRowRemapFailed:  {Fatal, DrainGPU, "row remapping failed: RMA candidate"},
		CodeNVLinkDown:      {Fatal, DrainGPU, "an NVLink that was up is down"},
		CodeNVLinkErrors:    {Degraded, Log, "NVLink error counters above the rate limit"},
		CodePCIeWidth:       {Degraded, Log, "PCIe link narrower than the GPU's maximum"},
		CodePCIeGen:         {Degraded, Log, "PCIe link generation below the maximum under load"},
		CodeThrottleHW:      {Degraded, Log, "clocks held down by hardware slowdown"},
		CodeThrottleHWTherm: {Degraded, Log, "clocks held down by hardware thermal slowdown"},
		CodeThrottleBrake:   {Degraded, Log, "clocks held down by the power brake"},
		CodeThrottleSWTherm: {Info, Ignore, "clocks held down by software thermal slowdown"},
		CodeGPUMissing:      {Fatal, DrainGPU, "the GPU vanished from NVML (count below the inventory)"},
		CodeProbeFailed:     {Fatal, DrainGPU, "a readmission probe failed"},
		CodeDiagFailed:      {Fatal, DrainGPU, "a background diagnostic of the idle GPU failed"},
		CodeECCTrend:        {Degraded, DrainGPU, "corrected ECC errors rising window after window: memory wearing out"},
		CodeRowRemapTrend:   {Degraded, DrainGPU, "rows remapped window after window: memory wearing out"},
	}
	for x, what := range map[int]string{
		48: "double-bit ECC error", 61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
		63: "ECC page retirement or row remapping event", 64: "ECC page retirement or row remapper failure",
		74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
		94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
	} {
		t[XIDCode(x)] = Rule{Fatal, DrainGPU, what}
	}
	// A contained ECC error stays within the MIG instance that met it
	// (NVIDIA's XID catalogue: the other instances run on); an
	// uncontained one (95) needs the whole GPU reset.
	t[XIDCode(94)] = Rule{Fatal, DrainSlice, "contained ECC error"}
	for x, what := range map[int]string{140: "unrecovered ECC error", 143: "GPU initialisation failure"} {
		t[XIDCode(x)] = Rule{Degraded, Log, what}
	}
	for x, what := range map[int]string{13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing", 45: "preemptive cleanup"} {
		t[XIDCode(x)] = Rule{Info, Ignore, what + " (usually the application)"}
	}
	return t
}

// Lookup returns the rule for code.
func (t Triage) Lookup(code string) Rule {
	if r, ok := t[code]; ok {
		return r
	}
	if strings.HasPrefix(code, "xid") {
		return UnknownXID
	}
	return Rule{Class: Degraded, Action: Log, What: code}
}

// ParseTriage applies overrides to a copy of base: each maps a code
// ("xid79", "row-remap-pending"; see Codes) to "class" or "class:action"
// ("info", "fatal:drain-node"). It returns every problem at once.
func ParseTriage(base Triage, overrides map[string]string) (Triage, error) {
	t := maps.Clone(base)
	var errs []error
	for _, code := range slices.Sorted(maps.Keys(overrides)) {
		v := overrides[code]
		if !ValidCode(code) {
			errs = append(errs, fmt.Errorf("[health.triage] %s: unknown code; use xid<N> (e.g. xid79) or one of %s", code, strings.Join(Codes(), ", ")))
			continue
		}
		cls, act, hasAct := strings.Cut(v, ":")
		r := Rule{Class: Class(cls), What: base.Lookup(code).What}
		if _, ok := defaultAction[r.Class]; !ok {
			errs = append(errs, fmt.Errorf("[health.triage] %s = %q: unknown class %q; use fatal, degraded or info, optionally with :drain-node, :drain-gpu, :drain-slice, :log or :ignore", code, v, cls))
			continue
		}
		r.Action = defaultAction[r.Class]
		if hasAct {
			r.Action = Action(act)
			if !slices.Contains([]Action{DrainNode, DrainGPU, DrainSlice, Log, Ignore}, r.Action) {
				errs = append(errs, fmt.Errorf("[health.triage] %s = %q: unknown action %q; use drain-node, drain-gpu, drain-slice, log or ignore", code, v, act))
				continue
			}
		}
		t[code] = r
	}
	return t, errors.Join(errs...)
}

// Codes lists the non-XID codes.
func Codes() []string {
	return []string{CodeTemp, CodePower, CodeECCDBE, CodeECCSBERate, CodeRowRemapPending, CodeRowRemapFailed,
		CodeNVLinkDown, CodeNVLinkErrors, CodePCIeWidth, CodePCIeGen, CodeThrottleHW, CodeThrottleHWTherm,
		CodeThrottleBrake, CodeThrottleSWTherm, CodeGPUMissing, CodeProbeFailed, CodeDiagFailed,
		CodeECCTrend, CodeRowRemapTrend}
}

// ValidCode reports whether code is an XID code or one of Codes.
func ValidCode(code string) bool {
	if n, ok := strings.CutPrefix(code, "xid"); ok {
		x, err := strconv.Atoi(n)
		return err == nil && x > 0 && strconv.Itoa(x) == n
	}
	return slices.Contains(Codes(), code)
}
