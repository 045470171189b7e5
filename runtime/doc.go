// Package runtime declares how the node agent runs a job's container,
// independent of containerd: the Runtime interface, the TaskConfig that
// describes one container, and ExitStatus. It imports no gpud/* package and
// no container engine; runtime/containerd implements it, runtime/fake
// scripts it for tests.
//
// Its name is the standard library's too. Import this package unnamed and
// the standard library's runtime as goruntime, in every file, so runtime.X
// always means this package (TestRuntimeImportNames in gpud/imports_test.go).
package runtime
