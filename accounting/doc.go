// Package accounting owns gpud's job history: accounting.db, an SQLite
// database (WAL, synchronous=FULL) holding one row per job, one row per
// attempt (a requeued job runs several, each with its own state, reason,
// checkpoint and lost work), one usage row per allocated GPU
// device per attempt, node events (down, drain, resume) and the audit log of
// state-changing calls. It answers sacct-style listings (Jobs, and
// Attempts for sacct --duplicates) and sreport-style rollups (Summary) from
// that history.
//
// Schema changes are numbered SQL files in migrations/, embedded in the
// binary and applied in order, each in its own transaction, when Open finds
// an older schema_version; a database written by a newer gpud is refused
// rather than guessed at.
//
// Units: times are unix seconds, durations whole seconds. A GPU-second is
// one whole GPU for one second: a shared-GPU allocation counts its fraction,
// a MIG slice its share of the GPU's compute slices (1g.10gb on an H100 is
// 1/7), so GPU-hours add up across whole GPUs, slices and fractions.
//
// accounting imports only gpud/spec, the standard library and
// mattn/go-sqlite3. Besides the controller's state store it is the only
// package that may import database/sql or the SQLite driver; it must not
// import the scheduler, the controller, the API or the runtime, so the
// controller can feed it records and the CLIs' server can read reports
// without either depending on the other.
package accounting
