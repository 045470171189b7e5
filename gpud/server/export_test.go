package server

// The wire conversions, for the tests that keep them in step with the
// accounting records.
var (
	AcctJob      = acctJob
	AcctAttempts = acctAttempts
)

// WithAuditBuffer sizes the audit queue (to fill it in a test).
func WithAuditBuffer(n int) Option { return func(s *Server) { s.auditBuffer = n } }
