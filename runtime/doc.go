// Package runtime declares how the node agent runs a job's container,
// independent of containerd: the Runtime interface, the TaskConfig that
// describes one container, and ExitStatus. It imports no gpud/* package and
// no container engine; runtime/containerd implements it, runtime/fake
// scripts it for tests.
package runtime
