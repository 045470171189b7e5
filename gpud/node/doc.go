// Package node is the gpud node agent: it registers the node's inventory
// with the controller, heartbeats, long-polls its assignments and
// reconciles the node towards them, running one runner goroutine per
// allocation that starts the job's container, enforces its time limit and
// reports how it ended.
//
// What it owns:
//   - the protocol side of a node (gpud/api's register, heartbeat,
//     assignments, events), spoken only through ControllerClient
//     (controller.go; an *api.Client in production);
//   - outbox.db in the state directory (SQLite): every started/exited event
//     is committed there before anything happens because of it, and sent
//     in order until the controller acknowledges it; it also remembers
//     which allocations already ended here so they never start twice;
//   - job directories (StateDir/jobs/<container ID>: script, tmp/, the
//     step socket and step records of gpud/node/step);
//   - turning an allocation into a runtime.TaskConfig (environment of
//     DESIGN §7, mounts, limits, CDI devices, output paths);
//   - driving the cooperative checkpoint protocol (DESIGN §4) through a
//     checkpoint.Store under CheckpointRoot: the job's staging directory,
//     its checkpoint signal every --checkpoint interval, --signal's SECS
//     before the time limit and before a stop the controller marks
//     Checkpoint (requeue), sealing on .done or exit code 85, a
//     "checkpointed" outbox event per seal, and GPUD_RESTART_DIR set to
//     the newest sealed checkpoint; rank 0 of a gang owns the directory;
//   - recovery after a restart: containers labelled with this node's name
//     are re-adopted, or their exits reported.
//
// A runner sees only runnerDeps (runnerdeps.go), not the Agent. Its wait
// loop (runner.go) dispatches the container's exit, stop requests and
// timers to checkpointMachine (ckptmachine.go) and stopMachine
// (stopmachine.go). A job's steps are package gpud/node/step, which sees
// the agent only as its step.Host (runnersteps.go). buildTask (task.go)
// composes the container from named builders, one concern a file:
// taskdevices.go, taskoutputs.go, taskmounts.go, taskenv.go, taskargs.go.
//
// What it must not import: gpud/controller, gpud/store, gpud/server or the
// scheduler (the controller is reached over the API only), containerd or
// go-nvml (it sees containers through runtime.Runtime and receives the GPU
// inventory already built by its caller).
package node
