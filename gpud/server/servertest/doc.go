// Package servertest starts a complete in-process controller for tests:
// a real SQLite store, the owner loop and the HTTP API on a unix socket.
// It lives apart from gpud/controller and gpud/server because it wires
// both with gpud/store, which neither may import.
package servertest
