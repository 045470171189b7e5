package api

import "github.com/gpud/gpud/gpud/api/wire"

// The submission's wire types and the error body live in package wire, so
// sbatch's one-shot path can link them without net/http; these are the
// same names under api.
const (
	Version       = wire.Version
	EnvController = wire.EnvController
	SlurmVersion  = wire.SlurmVersion

	CodeNotFound         = wire.CodeNotFound
	CodeInvalid          = wire.CodeInvalid
	CodeConflict         = wire.CodeConflict
	CodeUnavailable      = wire.CodeUnavailable
	CodePermissionDenied = wire.CodePermissionDenied
	CodeRefused          = wire.CodeRefused
	CodeInternal         = wire.CodeInternal
	CodeNotLeader        = wire.CodeNotLeader

	HeaderLeader         = wire.HeaderLeader
	HeaderIdempotencyKey = wire.HeaderIdempotencyKey
	HeaderStale          = wire.HeaderStale

	MaxIdempotencyKey = wire.MaxIdempotencyKey
)

type (
	ErrorBody      = wire.ErrorBody
	ErrorDetail    = wire.ErrorDetail
	Error          = wire.Error
	SubmitRequest  = wire.SubmitRequest
	SubmitResponse = wire.SubmitResponse
)

// CodeKind maps a wire code to its spec error kind.
func CodeKind(code string) error { return wire.CodeKind(code) }

// NewIdempotencyKey returns a random key for one submission (see
// wire.NewIdempotencyKey).
func NewIdempotencyKey() string { return wire.NewIdempotencyKey() }

// ValidIdempotencyKey says whether k may be an Idempotency-Key.
func ValidIdempotencyKey(k string) bool { return wire.ValidIdempotencyKey(k) }
