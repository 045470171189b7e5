// Package e2etest is the end-to-end suites' harness: it builds the
// binaries once per test binary (Main), starts `gpud standalone` clusters
// (StartCluster, OpenCluster) and separate `gpud node` processes
// (StartFaultCluster), runs the CLIs as root or as a throwaway local user
// (Cluster.CLI, Cluster.As, AddUser) and waits on jobs (WaitState,
// WaitJob). The suites live beside it, one package per area (gpud/e2e
// says which); each package is its own test binary, so the areas run
// side by side and each stays far from go test's timeout.
package e2etest
