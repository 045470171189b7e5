package server

// The wire conversion of attempts, for the test that keeps an empty
// history [] on the wire.
var AcctAttempts = acctAttempts

// WithAuditBuffer sizes the audit queue (to fill it in a test).
func WithAuditBuffer(n int) Option { return func(s *Server) { s.auditBuffer = n } }
