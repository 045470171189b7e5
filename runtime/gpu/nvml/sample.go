package nvml

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/runtime/gpu"
)

var _ gpu.Sampler = (*devices)(nil)

// Sample implements gpu.Sampler. Real NVML readings each need SUCCESS;
// one that fails (a GPU that does not support it, a GPU gone) is left
// out rather than failing the whole sample. XID errors come from an NVML
// event set registered at the first sample and drained without waiting at
// each one into a per-GPU log of recent XIDs, which every sample carries.
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
	} else {
		d.drainXIDs(n)
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
			s, xids, mig, ok := over.apply(syntheticSample(i, uuid))
			for _, x := range xids {
				d.recordXID(uuid, x, mig)
			}
			if ok {
				s.XIDs = slices.Clone(d.xids[uuid])
				out = append(out, s)
			}
			continue
		}
		s := d.readSample(i, uuid, h)
		s.XIDs, s.HasXID = slices.Clone(d.xids[uuid]), d.events != nil
		out = append(out, s)
	}
	return out, nil
}

// maxXIDLog is how many recent XIDs each GPU's log keeps: more than a
// sample interval ever sees from a GPU that still works.
const maxXIDLog = 64

// recordXID appends to uuid's XID log (mig: the MIG instance it was
// attributed to, or ""); callers hold mu.
func (d *devices) recordXID(uuid string, xid int, mig string) {
	if d.xids == nil {
		d.xids = map[string][]gpu.XIDEvent{}
	}
	d.xidSeq++
	l := append(d.xids[uuid], gpu.XIDEvent{Seq: d.xidSeq, XID: xid, MIG: mig})
	d.xids[uuid] = l[max(len(l)-maxXIDLog, 0):]
}

// maxXIDEvents bounds one sample's event draining (an XID storm must not
// stall the health loop).
const maxXIDEvents = 1024

// drainXIDs registers the XID event set on first use and moves the
// events pending now into the GPUs' XID logs. A driver that refuses
// leaves XIDs unread (HasXID false) rather than failing samples.
func (d *devices) drainXIDs(n int) {
	if !d.eventsTried {
		d.eventsTried = true
		set, ret := d.lib.EventSetCreate()
		if ret != nvml.SUCCESS {
			return
		}
		registered := 0
		for i := range n {
			h, ret := d.lib.DeviceGetHandleByIndex(i)
			if ret != nvml.SUCCESS {
				continue
			}
			if h.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
				registered++
			}
		}
		if registered == 0 {
			_ = set.Free()
			return
		}
		d.events = set
	}
	if d.events == nil {
		return
	}
	for range maxXIDEvents {
		e, ret := d.events.Wait(0)
		if ret != nvml.SUCCESS {
			return // ERROR_TIMEOUT: nothing more pending
		}
		if e.EventType != nvml.EventTypeXidCriticalError || e.Device == nil {
			continue
		}
		if uuid, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
			d.recordXID(uuid, int(e.EventData), eventMIG(e))
		}
	}
}

// noInstance is NVML's GPU (compute) instance ID of an event not
// attributed to a MIG instance.
const noInstance = 0xFFFFFFFF

// eventMIG returns the UUID of the MIG instance NVML attributed event e
// to ("" for the whole GPU, or when the instance cannot be named: the
// error then counts as the GPU's, the safe side).
func eventMIG(e nvml.EventData) string {
	if e.GpuInstanceId == noInstance {
		return ""
	}
	uuids, err := migUUIDs(e.Device)
	if err != nil {
		return ""
	}
	gi, ci := int(e.GpuInstanceId), int(e.ComputeInstanceId)
	if u, ok := uuids[[2]int{gi, ci}]; ok {
		return u
	}
	for k, u := range uuids { // the GPU instance's, whatever its compute instance
		if k[0] == gi {
			return u
		}
	}
	return ""
}

// Optional NVML calls of a sample, looked up before use.
const (
	fnClocksEventReasons = "GetCurrentClocksEventReasons"
	fnRemappedRows       = "GetRemappedRows"
)

// readSample reads one real GPU, keeping what succeeds.
func (d *devices) readSample(index int, uuid string, h nvml.Device) gpu.Sample {
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
		if c, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
			s.ECCCorrected = float64(c)
		}
	}
	if d.supports(h, fnRemappedRows) {
		if corr, unc, pending, failed, ret := h.GetRemappedRows(); ret == nvml.SUCCESS {
			s.RowRemapPending, s.RowRemapFailed, s.HasRowRemap = pending, failed, true
			s.RowsRemapped = float64(corr + unc)
		}
	}
	for link := range nvml.NVLINK_MAX_LINKS {
		st, ret := h.GetNvLinkState(link)
		if ret != nvml.SUCCESS {
			continue // no such link on this GPU
		}
		s.HasNVLink = true
		if st != nvml.FEATURE_ENABLED {
			continue
		}
		s.NVLinkUp++
		for _, c := range []nvml.NvLinkErrorCounter{nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY, nvml.NVLINK_ERROR_DL_CRC_FLIT} {
			if v, ret := h.GetNvLinkErrorCounter(link, c); ret == nvml.SUCCESS {
				s.NVLinkErrors += float64(v)
			}
		}
	}
	w, ret1 := h.GetCurrPcieLinkWidth()
	mw, ret2 := h.GetMaxPcieLinkWidth()
	g, ret3 := h.GetCurrPcieLinkGeneration()
	mg, ret4 := h.GetMaxPcieLinkGeneration()
	if ret1 == nvml.SUCCESS && ret2 == nvml.SUCCESS && ret3 == nvml.SUCCESS && ret4 == nvml.SUCCESS {
		s.PCIeWidth, s.PCIeMaxWidth, s.PCIeGen, s.PCIeMaxGen, s.HasPCIe = w, mw, g, mg, true
	}
	if d.supports(h, fnClocksEventReasons) {
		if r, ret := h.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
			s.Throttle, s.HasThrottle = r, true
		}
	} else if r, ret := h.GetCurrentClocksThrottleReasons(); ret == nvml.SUCCESS {
		s.Throttle, s.HasThrottle = r, true
	}
	return s
}

// syntheticSample is a mock GPU's fixed readings: utilisation 0-99%,
// 0-49 GiB used, 30-69 C, 70-369 W, no XID, no ECC error, no row
// remapping, 18 NVLinks up without errors (an H100 SXM's), a full PCIe
// gen5 x16 link, no throttling.
func syntheticSample(index int, uuid string) gpu.Sample {
	sum := sha256.Sum256([]byte(uuid))
	v := func(i int) uint64 { return binary.BigEndian.Uint64(sum[8*i:]) }
	return gpu.Sample{
		Index: index, UUID: uuid,
		UtilPct: float64(v(0) % 100), MemUsedMiB: float64(v(1)%50) * 1024,
		TempC: float64(30 + v(2)%40), PowerW: float64(70 + v(3)%300),
		NVLinkUp: 18, PCIeWidth: 16, PCIeMaxWidth: 16, PCIeGen: 5, PCIeMaxGen: 5,
		HasUtil: true, HasMem: true, HasTemp: true, HasPower: true, HasXID: true, HasECC: true,
		HasRowRemap: true, HasNVLink: true, HasPCIe: true, HasThrottle: true,
	}
}
