// Package e2e drives the built binaries (gpud, gpusubmit, gpuq) through
// `gpud standalone` with simulated GPUs and a private containerd, the way a
// user would. The tests need root, containerd and runc; outside CI a missing
// prerequisite is a loud skip, in CI (CI=true) a failure.
package e2e
