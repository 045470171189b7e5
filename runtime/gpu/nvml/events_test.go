package nvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/runtime/gpu"
)

// TestXIDEventsThroughTheEventSet drives the real backend's XID path
// (drainXIDs, eventMIG) with go-nvml's mock devices: the event set is made
// and registered on the GPUs once, the pending events are moved into each
// GPU's XID log, and an event NVML attributes to a GPU instance names that
// MIG instance's UUID (by GPU and compute instance, else by GPU instance),
// one of the whole GPU (instance 0xFFFFFFFF) none, and one whose instance
// the GPU does not list none (the GPU's, the safe side).
func TestXIDEventsThroughTheEventSet(t *testing.T) {
	mig := func(gi, ci int, uuid string) *mock.Device {
		return &mock.Device{
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ci, nvml.SUCCESS },
			GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		}
	}
	migs := []nvml.Device{mig(1, 0, "MIG-gi1"), mig(2, 0, "MIG-gi2")}
	registered := 0
	gpu0 := &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return "GPU-0", nvml.SUCCESS },
		RegisterEventsFunc:       func(uint64, nvml.EventSet) nvml.Return { registered++; return nvml.SUCCESS },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 3, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < len(migs) {
				return migs[i], nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
	pending := []nvml.EventData{
		{Device: gpu0, EventType: nvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 2, ComputeInstanceId: 0},
		{Device: gpu0, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: noInstance, ComputeInstanceId: noInstance},
		{Device: gpu0, EventType: nvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 1, ComputeInstanceId: 7},
		{Device: gpu0, EventType: nvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 5, ComputeInstanceId: 0},
	}
	set := &mock.EventSet{WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
		if len(pending) == 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		e := pending[0]
		pending = pending[1:]
		return e, nvml.SUCCESS
	}}
	created := 0
	lib := &mock.Interface{
		EventSetCreateFunc:         func() (nvml.EventSet, nvml.Return) { created++; return set, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return gpu0, nvml.SUCCESS },
	}
	d := &devices{backend: "test", lib: lib}
	d.drainXIDs(1)
	d.drainXIDs(1) // nothing more pending; the set is made once
	want := []gpu.XIDEvent{{Seq: 1, XID: 94, MIG: "MIG-gi2"}, {Seq: 2, XID: 79}, {Seq: 3, XID: 94, MIG: "MIG-gi1"}, {Seq: 4, XID: 94}}
	if diff := cmp.Diff(want, d.xids["GPU-0"]); diff != "" {
		t.Errorf("GPU-0's XID log (-want +got):\n%s", diff)
	}
	if created != 1 || registered != 1 {
		t.Errorf("event set made %d times, registered on %d GPUs; want once, on the one GPU", created, registered)
	}
}
