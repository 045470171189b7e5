package nvml

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/runtime/gpu"
)

var _ gpu.Sampler = (*devices)(nil)

// Sample implements gpu.Sampler. Real NVML readings each need SUCCESS;
// one that fails (a GPU that does not support it, a GPU gone) is left
// out rather than failing the whole sample. XID errors need an NVML event
// set, which the agent does not register yet (TODO(issue 6)), so a real
// GPU never reports one here.
//
// The mock backends report synthetic values: fixed per GPU, derived from
// its UUID, so tests and dashboards see stable, plausible numbers. They
// are not measurements.
func (d *devices) Sample(ctx context.Context) ([]gpu.Sample, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("sample GPUs of backend %q: already closed", d.backend)
	}
	if d.lib == nil {
		return []gpu.Sample{}, nil
	}
	n, ret := d.lib.DeviceGetCount()
	err := check("DeviceGetCount", ret)
	if err != nil {
		return nil, fmt.Errorf("sample GPUs of backend %q: %w", d.backend, err)
	}
	out := make([]gpu.Sample, 0, n)
	var over mockOverrides
	if d.mockMIGs != nil {
		if over, err = readMockHealth(d.mockHealth); err != nil {
			return nil, fmt.Errorf("sample GPUs of backend %q: %w", d.backend, err)
		}
	}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sample GPUs of backend %q: %w", d.backend, err)
		}
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if err := check(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret); err != nil {
			return nil, fmt.Errorf("sample GPUs of backend %q: %w", d.backend, err)
		}
		uuid, ret := h.GetUUID()
		if err := check("GetUUID", ret); err != nil {
			return nil, fmt.Errorf("sample GPU %d of backend %q: %w", i, d.backend, err)
		}
		if d.mockMIGs != nil {
			out = append(out, over.apply(syntheticSample(i, uuid)))
			continue
		}
		out = append(out, readSample(i, uuid, h))
	}
	return out, nil
}

// readSample reads one real GPU, keeping what succeeds.
func readSample(index int, uuid string, h nvml.Device) gpu.Sample {
	s := gpu.Sample{Index: index, UUID: uuid}
	if u, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
		s.UtilPct, s.HasUtil = float64(u.Gpu), true
	}
	if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		s.MemUsedMiB, s.HasMem = float64(m.Used)/(1<<20), true
	}
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		s.TempC, s.HasTemp = float64(t), true
	}
	if p, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
		s.PowerW, s.HasPower = float64(p)/1000, true // milliwatts
	}
	if e, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		s.ECCUncorrected, s.HasECC = float64(e), true
	}
	return s
}

// syntheticSample is a mock GPU's fixed readings: utilisation 0-99%,
// 0-49 GiB used, 30-69 C, 70-369 W, no XID, no ECC error.
func syntheticSample(index int, uuid string) gpu.Sample {
	sum := sha256.Sum256([]byte(uuid))
	v := func(i int) uint64 { return binary.BigEndian.Uint64(sum[8*i:]) }
	return gpu.Sample{
		Index: index, UUID: uuid,
		UtilPct: float64(v(0) % 100), MemUsedMiB: float64(v(1)%50) * 1024,
		TempC: float64(30 + v(2)%40), PowerW: float64(70 + v(3)%300),
		HasUtil: true, HasMem: true, HasTemp: true, HasPower: true, HasXID: true, HasECC: true,
	}
}
