package nvml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/gpud/gpud/runtime/gpu"
)

// WithMockHealthFile is the health test hook of the mock backends: before
// each sample the mock reads path (if it exists), a JSON object keyed by
// GPU index ("3") or UUID whose values override that GPU's synthetic
// readings, e.g. {"3": {"temp_c": 90}}, {"0": {"xid": 79}} or
// {"1": {"util": 2}}. Fault injection tests use it to make a mock GPU
// overheat, fail or sit idle (util feeds the usage samples the idle-GPU
// policy judges); real backends ignore it. Removing the file restores the
// synthetic readings. An "xid" (or "xids") is reported by every sample
// while the file names it, as if the GPU raised it again each time;
// {"gone": true} makes the GPU vanish from samples (fell off the bus).
func WithMockHealthFile(path string) Option { return func(o *options) { o.mockHealth = path } }

// mockOverride is one GPU's overridden readings; nil fields keep theirs.
type mockOverride struct {
	TempC *float64 `json:"temp_c"`
	// Util is the GPU utilisation in percent (0-100).
	Util           *float64 `json:"util"`
	PowerW         *float64 `json:"power_w"`
	XID            *float64 `json:"xid"`
	XIDs           []int    `json:"xids"`
	ECCUncorrected *float64 `json:"ecc_uncorrected"`
	ECCCorrected   *float64 `json:"ecc_corrected"`
	RowRemapPend   *bool    `json:"row_remap_pending"`
	RowRemapFailed *bool    `json:"row_remap_failed"`
	RowsRemapped   *float64 `json:"rows_remapped"`
	NVLinkUp       *int     `json:"nvlink_up"`
	NVLinkErrors   *float64 `json:"nvlink_errors"`
	PCIeWidth      *int     `json:"pcie_width"`
	PCIeGen        *int     `json:"pcie_gen"`
	Throttle       *uint64  `json:"throttle"`
	Gone           bool     `json:"gone"`
	// MIG attributes the override's XIDs to this MIG instance (its UUID),
	// as NVML's event does with the instance's ID.
	MIG string `json:"mig"`
}

type mockOverrides map[string]mockOverride

// readMockHealth reads the hook file; a missing file (or no hook) is no
// override, a malformed one an error naming the file and the format.
func readMockHealth(path string) (mockOverrides, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read mock GPU health file: %w", err)
	}
	var m mockOverrides
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("mock GPU health file %s: %w; write e.g. {\"3\": {\"temp_c\": 90, \"util\": 2, \"xid\": 79, \"power_w\": 800, \"ecc_uncorrected\": 1, \"ecc_corrected\": 5, \"row_remap_pending\": true, \"row_remap_failed\": true, \"rows_remapped\": 3, \"nvlink_up\": 17, \"nvlink_errors\": 9, \"pcie_width\": 8, \"pcie_gen\": 3, \"throttle\": 8, \"gone\": true}} (\"mig\": \"MIG-...\" attributes the XIDs to that MIG instance)", path, err)
	}
	return m, nil
}

// apply overrides one GPU's sample and returns the XIDs it raises now
// and the MIG instance they are attributed to; false: the GPU is gone.
func (m mockOverrides) apply(s gpu.Sample) (gpu.Sample, []int, string, bool) {
	o, ok := m[strconv.Itoa(s.Index)]
	if !ok {
		o, ok = m[s.UUID]
	}
	if !ok {
		return s, nil, "", true
	}
	set(&s.TempC, o.TempC)
	set(&s.UtilPct, o.Util)
	set(&s.PowerW, o.PowerW)
	set(&s.ECCUncorrected, o.ECCUncorrected)
	set(&s.ECCCorrected, o.ECCCorrected)
	set(&s.RowRemapPending, o.RowRemapPend)
	set(&s.RowRemapFailed, o.RowRemapFailed)
	set(&s.RowsRemapped, o.RowsRemapped)
	set(&s.NVLinkUp, o.NVLinkUp)
	set(&s.NVLinkErrors, o.NVLinkErrors)
	set(&s.PCIeWidth, o.PCIeWidth)
	set(&s.PCIeGen, o.PCIeGen)
	set(&s.Throttle, o.Throttle)
	var xids []int
	if o.XID != nil && *o.XID != 0 {
		xids = append(xids, int(*o.XID))
	}
	return s, append(xids, o.XIDs...), o.MIG, !o.Gone
}

func set[T any](dst, v *T) {
	if v != nil {
		*dst = *v
	}
}
