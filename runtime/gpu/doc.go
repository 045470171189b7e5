// Package gpu discovers a node's GPUs behind the small Devices interface,
// partitions them into MIG instances behind the MIG interface (the nvml
// implementation returned by nvml.Open satisfies both; assert
// devs.(gpu.MIG)), and writes the CDI specs that inject them into
// containers: WriteCDISpec for whole GPUs (kind nvidia.com/gpu),
// WriteMIGCDISpec for MIG instances (kind nvidia.com/mig, named by MIG
// UUID), InjectCDIDevices to apply them; MakeMockDeviceNodes and
// MakeMockMIGDeviceNodes make the device nodes mock GPUs need.
//
// MIG errors wrap ErrMIGDisabled, ErrUnknownProfile, ErrInsufficientResources,
// ErrInUse and ErrNotFound so callers can react with errors.Is. Only
// runtime/gpu/nvml imports go-nvml; this package imports no gpud/* package
// so it can stay in the runtime tree.
package gpu
