// Package controller is the central daemon's state machine: the owner loop
// that alone mutates cluster state (jobs, nodes, allocations), group-commits
// every change to a Store before acknowledging it, runs scheduling cycles
// through the pure gpud/sched core, and serves the node protocol (register,
// heartbeat, assignments long-poll, events).
//
// It declares the interfaces it consumes (Store, Recorder, UsageSource)
// and imports gpud/spec, gpud/sched (with its fairshare and priority
// packages), gpud/config (FromConfig maps a validated gpud.toml onto
// Config), gpud/signame and the standard library. It must not import
// gpud/server, gpud/store, gpud/node, accounting, database/sql, net/http or
// runtime/* (gpud/imports_test.go holds it to that): the server adapts HTTP
// to the methods here, and gpud/daemon wires a store in.
//
// Concurrency: Run is the only goroutine that touches the state. Every
// public method sends the owner an op (a closure) and waits for its reply;
// the owner drains all queued ops, applies them, commits their changes in
// ONE store transaction, then replies to all of them (group commit), and
// only after that wakes node long-polls and job waiters.
package controller
