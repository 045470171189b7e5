// Package store keeps the controller's state in SQLite (state.db): jobs,
// nodes and the job id counter. It implements controller.Store through
// structural typing and imports only gpud/spec, database/sql and the
// SQLite driver; it must not import gpud/controller, gpud/server or
// runtime/*.
//
// Durability: WAL with synchronous=FULL, so a transaction that Apply
// returned from survives kill -9 and power loss. The controller relies on
// this to acknowledge a submission only after its row is committed.
//
// Payloads: a job's script, args and environment live in the
// payloads table, one row per array (keyed by the array job id) or plain
// job, so an array of 10,000 tasks stores its script once and a task's
// state change rewrites a small row. The store keeps what each payloads
// row holds (sharing the jobs' strings), compares a job's payload with it
// on every Apply, and keeps a payload that differs inline in the job's
// row, so Load always returns exactly what was applied. Schema 1 rows
// (everything inline) load as they are and move their payload out on
// their next update.
package store
