// Package gpu discovers a node's GPUs behind the small Devices interface and
// writes the CDI spec that injects them into containers (WriteCDISpec,
// InjectCDIDevices), plus the device nodes mock GPUs need
// (MakeMockDeviceNodes). Only
// runtime/gpu/nvml imports go-nvml; this package imports no gpud/* package
// so it can stay in the runtime tree.
package gpu
