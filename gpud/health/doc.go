// Package health is gpud's health model of a GPU: it turns a node's GPU
// readings over time (XID errors, ECC counters, row remapping, NVLink,
// PCIe link, clock-throttle reasons, temperature, power, GPUs that vanish)
// into findings, each classified by a triage table (fatal, degraded, info)
// with the action the controller takes (drain the GPU, drain the node,
// record only, ignore), and decides when a faulted GPU may be readmitted
// (readings clean for a probe window, then a clean probe).
//
// It is pure like the scheduler core: no I/O, no clock reads (every call
// takes now), no goroutines, no logging. The node agent feeds it samples
// from NVML (runtime/gpu) and runs the probes; the controller acts on the
// findings it reports. It imports only the standard library, so the
// agent, the controller, gpuq and the simulator can all share its
// vocabulary (codes, classes, actions).
package health
