// Package api is gpud's versioned REST/JSON surface: request and response
// envelopes for /v1 and the Go client that gpusubmit, gpuq and node agents
// use. It imports the standard library and gpud/spec only (spec is itself
// stdlib-only), so external tools can vendor it cheaply.
package api
