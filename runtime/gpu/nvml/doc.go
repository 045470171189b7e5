// Package nvml discovers GPUs through NVIDIA's NVML and is the only package
// that imports github.com/NVIDIA/go-nvml. Open picks a backend: the real
// library ("nvml", "auto"), one of go-nvml's mock DGX servers
// ("mock:dgx-a100", "mock:dgx-h100", "mock:dgx-h200") or no GPUs ("none").
// Real and mock GPUs are read by the same walk over nvml.Interface, so the
// mocks test the code that runs on real nodes.
//
// No nvml.Return leaves this package: every failing call becomes an error
// that names the call. It imports runtime/gpu for the Device type and no
// gpud/* package.
package nvml
