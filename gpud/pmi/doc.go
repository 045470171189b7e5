// Package pmi is the process-management side of MPI in job steps (srun
// --mpi): what an MPI library asks of the resource manager to find its
// peers at MPI_Init.
//
// What it owns:
//   - the MPI types srun knows (none, pmi2, pmix) and srun --mpi=list
//     (types.go);
//   - the PMI wire protocols MPICH and its derivatives speak over the file
//     descriptor PMI_FD: PMI-1 (lines of "cmd=... key=value") and PMI-2
//     (length-prefixed "cmd=...;key=value;" commands), one node's server
//     of them for a step's local tasks, with the step's key-value space
//     (wire.go, node.go);
//   - PMI_process_mapping, the layout string MPICH reads to find which
//     ranks share a node (mapping.go);
//   - a step's fence: each node's contribution gathered and every node
//     given all of them, the one collective both PMI servers and the PMIx
//     helper need across nodes (fence.go);
//   - the line protocol between the node agent and the PMIx helper
//     (gpud-pmix, built from pmixd, which links OpenPMIx's server
//     library) that runs in the job's container (helper.go).
//
// It is a leaf (stdlib only): the node agent's steps (gpud/node/step)
// and the PMIx helper share it. How a task's connection reaches a server
// (a socket in the job directory handed over as PMI_FD by gpud/launch)
// and how fences travel between agents (the step connections) belong to
// gpud/node/step.
package pmi
