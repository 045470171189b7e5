// Package server is the controller's HTTP surface: it decodes api
// requests (unknown fields rejected, 4 MiB limit), takes the caller's
// identity from unix-socket peer credentials, calls gpud/controller and
// maps error kinds to statuses with api.KindCode.
//
// It imports gpud/api, gpud/spec and gpud/controller; it must not import
// gpud/store, database/sql or runtime/* (gpud main wires the store; the
// servertest subpackage does it for tests).
package server
