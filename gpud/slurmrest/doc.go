// Package slurmrest serves Slurm's REST API (slurmrestd's data_parser
// versions v0.0.42 to v0.0.45) under /slurm/v0.0.4X/, /slurmdb/v0.0.4X/
// and /util/v0.0.4X/, with /openapi/v3 describing what it serves.
//
// One model, many versions: every answer is written from gpud's own
// records (spec.Job, spec.Node, api.Partition, api.AcctJob, ...) through
// field tables (fields.go) whose entries say from which data_parser
// version a field exists and until which one, so the versions differ
// only where Slurm's documents differ and a new version is a new row in
// Versions plus the rows its fields add or drop.
//
// It holds no state and makes no decision of its own about who may do
// what: it reaches gpud only through V1, which gpud/server implements by
// serving each call with its own /v1 handlers under the identity of the
// request being answered. Roles, ownership, limits, privacy and the audit
// log are therefore the /v1 API's by construction, not a copy of them.
//
// It imports gpud/api, gpud/spec, gpud/hostlist and the sbatch option
// table (cli/directive, pure), so that a job submitted here means
// what the same options mean to sbatch. It must not import gpud/server,
// gpud/controller, gpud/store or accounting.
package slurmrest
