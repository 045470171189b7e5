// Package server is the controller's HTTP surface: it decodes api
// requests (unknown fields rejected, 4 MiB limit), takes the caller's
// identity from unix-socket peer credentials, calls gpud/controller and
// maps error kinds to statuses with api.KindCode.
//
// It imports gpud/api, gpud/spec, gpud/controller and accounting (for the
// Filter and Record types of its small Accounting interface, which gpud
// main satisfies with *accounting.DB via WithAccounting); it must not
// import gpud/store, database/sql or runtime/* directly (gpud main wires
// the store; the servertest subpackage does it for tests).
package server
