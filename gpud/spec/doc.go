// Package spec holds gpud's domain types (jobs, nodes, GPUs, allocations),
// their validation and the error kinds every layer shares.
//
// spec imports the standard library only: the scheduler core, the API
// client, the CLIs and the node agent all depend on it, so it must stay a
// leaf. The types carry JSON tags because they are also the API's wire
// shape (see docs/architecture.md, "api reuses spec").
package spec
