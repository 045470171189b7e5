// Package store keeps the controller's state in SQLite (state.db): jobs,
// nodes and the job id counter. It implements controller.Store through
// structural typing and imports only gpud/spec, database/sql and the
// SQLite driver; it must not import gpud/controller, gpud/server or
// runtime/*.
//
// Durability: WAL with synchronous=FULL, so a transaction that Apply
// returned from survives kill -9 and power loss. The controller relies on
// this to acknowledge a submission only after its row is committed.
package store
