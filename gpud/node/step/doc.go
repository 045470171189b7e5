// Package step runs job steps (srun) on a node agent: one allocation's
// steps (Alloc, held by the agent's runner of that allocation) and the
// node's side of steps across nodes (Node: the in-process registry of
// gpud standalone, Peers, and the step listener of agents on separate
// hosts, Net).
//
// What it owns:
//   - the job's step socket (SocketName in the job directory) and the
//     step protocol of gpud/api towards srun: a request, frames back
//     (layout, started, output, each task's exit, done), signals,
//     terminal sizes and stdin the other way (serve.go, follow.go);
//   - laying a step's tasks out over the allocation (layout.go), booking
//     its CPUs and GPUs among the allocation's running steps (ledger.go),
//     numbering it per job (record.go) and recording its start and end
//     as outbox events through Host;
//   - execing a node's tasks into the allocation's container
//     (runtime.Execer; part.go), on a terminal for srun --pty (tty.go);
//   - agents starting each other's parts, in process or over TLS with
//     node certificates (peer.go, peerclient.go, listen.go);
//   - steps across a node agent's restart: step records in the job
//     directory, re-attaching to running tasks (runtime.ExecAttacher) and
//     holding their output until srun follows the step again (state.go,
//     relay.go), and the output read while srun's stream holds it until
//     the step is recorded as started, kept on disk (early.go).
//
// What it asks of the node agent is Host (host.go), three calls, which
// the agent implements: find an allocation's steps, commit an outbox
// event, reserve step numbers. It must not import gpud/node (the agent
// imports it), the controller, the stores, the scheduler or containerd.
package step
