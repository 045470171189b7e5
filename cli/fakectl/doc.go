// Package fakectl is a hand-written fake gpud controller for the CLI tests:
// an httptest server on a unix socket that answers the /v1 endpoints
// gpud/api.Client calls, from jobs and nodes the test sets, and records
// every request so tests can check what the CLIs sent.
//
// It imports gpud/api, gpud/spec, net/http/httptest and testing; production
// code must not import it.
package fakectl
