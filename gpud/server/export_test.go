package server

// The wire conversions, for the tests that keep them in step with the
// accounting records.
var (
	AcctJob      = acctJob
	AcctAttempts = acctAttempts
)
