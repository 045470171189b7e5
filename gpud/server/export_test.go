package server

// The wire conversion of attempts, for the test that keeps an empty
// history [] on the wire.
var AcctAttempts = acctAttempts

// WithAuditBuffer sizes the audit queue (to fill it in a test).
func WithAuditBuffer(n int) Option { return func(s *Server) { s.auditBuffer = n } }

// OpenConns is how many accepted connections count against the caps now
// (a node's stops counting once its certificate is seen).
func (s *Server) OpenConns() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return s.conns.total
}
