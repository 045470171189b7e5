// Package ocispec owns the OCI runtime spec of a job container: one
// containerd oci.SpecOpts per concern (root, process, user, namespaces,
// mounts, limits, rlimits, CDI devices, output files, environment) and Build,
// the single place that composes them for a runtime.TaskConfig.
//
// Each option edits only its own part of the spec, so each is tested on an
// empty spec without a daemon; a golden file pins the full spec of a
// representative job.
//
// It imports runtime, containerd's pkg/oci and core/containers (for the
// SpecOpts type only), the OCI runtime-spec types and the CDI library. It
// must not import the containerd client (that is runtime/containerd's job)
// nor any gpud/* package.
package ocispec
