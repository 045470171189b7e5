// Package server is the controller's HTTP surface: it decodes api
// requests (unknown fields rejected, 4 MiB limit, UTF-8 only) and checks
// them at the edge (input.go: NUL bytes, control characters, lengths,
// '..' in output paths, absurd counts), takes the caller's identity from
// unix-socket peer credentials or, over TCP, from a TLS connection's
// bearer token (auth.go), enforces roles (user, operator, admin, node),
// redacts other users' scripts, environment and paths, rate-limits
// submissions per user, calls gpud/controller and maps error kinds to
// statuses with api.KindCode.
//
// Before any of that, it defends itself (conns.go, edge.go; see Limits):
// connections are capped at accept per uid on the socket (root never)
// and per address on TCP (released once a node certificate is shown),
// and in total; reading a request has a deadline, lifted once its body is
// read so long polls are not cut; idle keep-alives are closed; bodies are
// limited by endpoint from their Content-Length before any read; who may
// act (role, job ownership via Controller.MayAct, the join token in its
// header) is checked before the body is read, and such refusals and every
// 401 close the connection.
//
// Role-only decisions are the server's: drain/resume and reconfigure need
// operator; the node protocol needs root on the socket or a node token
// bound to the node's name. Ownership (a user's own jobs) and cluster
// rules stay in the controller. Because controller.Caller knows no roles,
// an action the server authorised by role reaches the controller as uid 0
// under the actor's name (identity.privileged).
//
// It imports gpud/api, gpud/spec, gpud/controller, gpud/auth (token
// claims) and accounting (for the
// Filter and Record types of its small Accounting interface, which gpud
// main satisfies with *accounting.DB via WithAccounting); it must not
// import gpud/store, database/sql or runtime/* directly (gpud main wires
// the store; the servertest subpackage does it for tests).
package server
