// Package nvml discovers GPUs through NVIDIA's NVML and is the only package
// that imports github.com/NVIDIA/go-nvml. Open picks a backend: the real
// library ("nvml", "auto"), one of go-nvml's mock DGX servers
// ("mock:dgx-a100", "mock:dgx-h100", "mock:dgx-h200") or no GPUs ("none").
// Its result implements gpu.Devices and gpu.MIG. Real and mock GPUs are
// read and partitioned by the same walk over nvml.Interface, so the mocks
// test the code that runs on real nodes.
//
// The mocks are made to behave like hardware where go-nvml's do not:
//
//   - MIG (mockmig.go): mode on/off (and pending until reset), capacity,
//     overlap and instance-count checks (INSUFFICIENT_RESOURCES), MIG off
//     → NOT_SUPPORTED, IN_USE on destroying a busy instance or switching
//     MIG off under instances, and MIG device handles with deterministic
//     "MIG-" UUIDs hashed from the node seed's GPU UUID, profile and
//     placement. Mock MIG state lives in memory: a restarted node agent
//     starts with no instances.
//   - Topology (open.go): GPUs get a DGX's PCI bus IDs (DGX H100/H200:
//     18, 2a, 3a, 5d, 9a, ab, ba, db; DGX A100: 07, 0f, 47, 4e, 87, 90,
//     b7, bd), GPUs 0-3 NUMA node 0 and 4-7 node 1, all NVLink peers
//     (NVSwitch). The mocks model none of this; the values match the real
//     machines' bus order and socket split (the DGX A100's NPS4 NUMA
//     split is simplified to one node per socket) so RDMA pairing tests
//     with a fake sysfs (runtime/rdma) can hang NICs next to them.
//     MockPCIBusID returns them.
//
// MIG profile names follow nvidia-smi ("1g.10gb", "1g.10gb+me"); see
// MIGProfileName. No nvml.Return leaves this package: every failing call
// becomes an error that names the call. It imports runtime/gpu for its
// types and no gpud/* package.
package nvml
