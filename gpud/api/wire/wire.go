// Package wire is the part of gpud's /v1 API that a client needs to
// submit a job: the submission's request and answer, the error body and
// its codes, and the headers. It imports the standard library (no
// net/http, no crypto/tls) and gpud/spec only, so sbatch's one-shot path
// (gpusubmit/quick) links it without the HTTP and TLS stacks, whose
// package initialisation was a third of an sbatch process's start.
// Package api re-exports every name here; other code uses api.
package wire

import "github.com/gpud/gpud/gpud/spec"

// Version is the path prefix of this API.
const Version = "v1"

// EnvController names the environment variable that holds the
// controller's address for gpusubmit, gpuq and Slurm's names.
const EnvController = "GPUD_CONTROLLER"

// SlurmVersion is what the Slurm command names print for --version
// (-V): tools that parse "slurm MAJOR.MINOR" to pick the options they
// use see the Slurm release whose interface gpud follows.
const SlurmVersion = "slurm 22.05.0 (gpud)"

// ErrorBody is the JSON body of every non-2xx response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong. Code is one of the Code* constants and
// maps back to a spec error kind on the client.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes on the wire.
const (
	CodeNotFound         = "not_found"
	CodeInvalid          = "invalid"
	CodeConflict         = "conflict"
	CodeUnavailable      = "unavailable"
	CodePermissionDenied = "permission_denied"
	CodeRefused          = "refused"
	CodeInternal         = "internal"
	// CodeNotLeader (HTTP 421 Misdirected Request) answers a write or a
	// node-protocol call sent to a controller that is not the Raft leader.
	// HeaderLeader names the leader's API address when one is known (empty
	// during an election); the client retries there, or at the next address
	// of its list.
	CodeNotLeader = "not_leader"
)

// Headers of an HA controller group (issue 16).
const (
	// HeaderLeader is the leader's API address (e.g. https://10.0.0.1:6817)
	// on a not_leader answer, and on every answer of a follower.
	HeaderLeader = "Gpud-Leader"
	// HeaderIdempotencyKey names one submission (SubmitRequest.
	// IdempotencyKey): at most MaxIdempotencyKey printable ASCII bytes.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderStale is "true" on reads a follower answered from its replica,
	// which may lag the leader.
	HeaderStale = "Gpud-Stale"
)

// Error is an API error with the controller's message; errors.Is matches
// the spec kind its code maps to.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Is maps wire codes back to spec kinds.
func (e *Error) Is(target error) bool { return target == CodeKind(e.Code) }

// CodeKind maps a wire code to its spec error kind.
func CodeKind(code string) error {
	switch code {
	case CodeNotFound:
		return spec.ErrNotFound
	case CodeInvalid:
		return spec.ErrInvalid
	case CodeConflict:
		return spec.ErrConflict
	case CodeUnavailable:
		return spec.ErrUnavailable
	case CodePermissionDenied:
		return spec.ErrPermissionDenied
	case CodeRefused:
		return spec.ErrRefused
	case CodeNotLeader:
		return spec.ErrNotLeader
	}
	return nil
}

// SubmitRequest is POST /v1/jobs.
type SubmitRequest struct {
	Job spec.JobSpec `json:"job"`
	// Het are the further components of a heterogeneous job (sbatch's
	// `:` and `#SBATCH hetjob`), each with its own resources, partition
	// and task layout; Job is component 0, whose script runs. The
	// controller makes one job per component, with consecutive ids.
	Het []spec.JobSpec `json:"het,omitempty"`
	// TestOnly validates and estimates without keeping the job.
	TestOnly bool `json:"test_only,omitempty"`
	// IdempotencyKey, sent as the Idempotency-Key header, names this
	// submission (NewIdempotencyKey): the controller makes one job per
	// key and user and answers a resend with the first job's ids, so a
	// client may send it again after a lost connection or a 503.
	IdempotencyKey string `json:"-"`
}

// SubmitResponse answers a submission. IDs has one entry per array task
// (or one for a plain job); ID is the first.
type SubmitResponse struct {
	ID  spec.JobID   `json:"id"`
	IDs []spec.JobID `json:"ids,omitempty"`
	// For TestOnly: when and where the job would start.
	ExpectedStart spec.Time `json:"expected_start"`
	Nodes         []string  `json:"nodes,omitempty"`
	Message       string    `json:"message,omitempty"`
}
