// Package checkpoint owns a node's checkpoint directories: the staging
// directory a running job writes into, the immutable numbered checkpoints
// sealed from it, how many are kept, and which one a restarted job is given.
// It also owns the job-facing parts of the cooperative protocol that are not
// files: the --signal syntax (ParseSignal) and the exit code a job uses to
// say it checkpointed and stopped (ExitCodeCheckpointed).
//
// The protocol (DESIGN §4): the node agent calls Staging and Chown and starts
// the job with GPUD_CHECKPOINT_DIR set to the staging directory and
// GPUD_RESTART_DIR set to Latest's Dir (empty on the first run). When
// signalled, the job writes its files into the staging directory and then
// touches $GPUD_CHECKPOINT_DIR/.done, or exits with ExitCodeCheckpointed, in
// which case the agent calls MarkReady. The agent then calls Seal, and
// Staging again before the job's next checkpoint.
//
// On-disk layout under the store's root:
//
//	<root>/<jobid>/staging/              the job writes here
//	<root>/<jobid>/ckpt-00000007/        sealed: the job's files + MANIFEST.json
//	<root>/<jobid>/trash-ckpt-00000003/  being deleted (leftover after a crash)
//
// A directory becomes ckpt-<seq> only by an atomic rename after every file,
// directory and the manifest are fsynced, so a crash leaves either the old
// set of checkpoints plus a staging directory, or the new checkpoint fully
// sealed. Anything named ckpt-* whose manifest does not verify is never
// offered for restart and is removed by the next Seal.
//
// checkpoint imports the standard library and gpud/spec only. It must not
// import other gpud packages, containerd or database/sql: the node agent
// records checkpoints and the runtime mounts them; this package only knows
// files, so it can be tested on real directories without a daemon.
package checkpoint
