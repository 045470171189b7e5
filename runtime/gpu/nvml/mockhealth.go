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
// policy judges); real backends ignore it. Removing the file restores the synthetic readings.
func WithMockHealthFile(path string) Option { return func(o *options) { o.mockHealth = path } }

// mockOverride is one GPU's overridden readings; nil fields keep theirs.
type mockOverride struct {
	TempC *float64 `json:"temp_c"`
	// Util is the GPU utilisation in percent (0-100).
	Util           *float64 `json:"util"`
	PowerW         *float64 `json:"power_w"`
	XID            *float64 `json:"xid"`
	ECCUncorrected *float64 `json:"ecc_uncorrected"`
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
		return nil, fmt.Errorf("mock GPU health file %s: %w; write e.g. {\"3\": {\"temp_c\": 90, \"util\": 2, \"xid\": 79, \"power_w\": 800, \"ecc_uncorrected\": 1}}", path, err)
	}
	return m, nil
}

func (m mockOverrides) apply(s gpu.Sample) gpu.Sample {
	o, ok := m[strconv.Itoa(s.Index)]
	if !ok {
		o, ok = m[s.UUID]
	}
	if !ok {
		return s
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.TempC, o.TempC)
	set(&s.UtilPct, o.Util)
	set(&s.PowerW, o.PowerW)
	set(&s.XID, o.XID)
	set(&s.ECCUncorrected, o.ECCUncorrected)
	return s
}
