// Package e2e holds gpud's end-to-end suites, which drive the built
// binaries (gpud, gpusubmit, gpuq, sbatch and Slurm's names) the way a
// user would: `gpud standalone` with mock GPUs and a private containerd,
// separate `gpud node` and `gpud controller` processes, network
// namespaces for separate hosts. They need root, containerd and runc;
// outside CI a missing prerequisite is a loud skip, in CI (CI=true) a
// failure.
//
// One package per area, each its own test binary (go test runs them side
// by side, and each stays far from its timeout), sharing the harness in
// e2etest:
//
//	jobs       a job's life: submit, arrays, accounting, scheduling and
//	           placement, MIG, RDMA, idle jobs, limits, durability (kill -9)
//	faults     node faults: agents stopped, killed, overheating; checkpoints
//	security   other users and hostile input: files, floods, sandboxing,
//	           state file modes
//	steps      job steps: srun inside and outside jobs, ttys, steps over
//	           the network, step accounting and resources
//	ha         an HA group of three controllers
//	multihost  hosts in network namespaces: gangs, links cut, restarts
//	clients    real Slurm clients (Snakemake, submitit), Slurm's commands,
//	           benchmarks
//
// Add a test to the package of its area; a new area is a new package
// with a TestMain calling e2etest.Main.
package e2e
