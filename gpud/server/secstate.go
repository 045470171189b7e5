package server

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// secState is what the server refuses or hides beyond roles (revoked
// credentials are the revocation state's, Server.rev): the site's secret
// environment variables, and the operators' view of /metrics.
type secState struct {
	secretEnv atomic.Pointer[[]string]
	// fullMetrics serves /metrics with per-user series (user and account
	// labels) to operators and root; everyone else gets s.metrics.
	fullMetrics http.Handler
}

// WithRevokedNodeCerts refuses node certificates whose serial numbers
// are in serials; see SetRevokedNodeCerts.
func WithRevokedNodeCerts(serials []string) Option {
	return func(s *Server) { s.SetRevokedNodeCerts(serials) }
}

// SetRevokedNodeCerts replaces the revoked node certificate serials,
// keeping the revoked tokens; see SetRevocations.
func (s *Server) SetRevokedNodeCerts(serials []string) {
	s.SetRevocations(serials, s.rev.List().Tokens)
}

// WithSecretEnv masks the values of the site's secret variables (and of
// GPUD_* credentials) where a job's environment is shown to anyone but
// its owner; see SetSecretEnv.
func WithSecretEnv(names []string) Option { return func(s *Server) { s.SetSecretEnv(names) } }

// SetSecretEnv replaces the site's secret variable names (a
// configuration reload); safe while serving.
func (s *Server) SetSecretEnv(names []string) {
	n := slices.Clone(names)
	s.sec.secretEnv.Store(&n)
}

func (s *Server) secretEnv() []string {
	if p := s.sec.secretEnv.Load(); p != nil {
		return *p
	}
	return nil
}

// maskSecrets hides secret values in j's environment from a caller who
// does not own it (operators see every job's environment). The
// controller drops them at submission; this covers jobs stored before.
func (s *Server) maskSecrets(id identity, j *spec.Job) {
	if id.caller.Known && id.caller.UID == j.UID && id.role != auth.RoleNode {
		return
	}
	j.Env = spec.MaskSecretEnv(j.Env, s.secretEnv())
}

// WithOperatorMetrics serves h at /metrics to operators, admins and
// root, and the WithMetrics handler to everyone else. h is meant to add
// the per-user series (user and account labels, e.g. the fairshare
// factor) that the other leaves out: who uses the cluster is not every
// local user's business. Over TCP a caller without a token gets the
// other handler; with an operator's token, h.
func WithOperatorMetrics(h http.Handler) Option { return func(s *Server) { s.sec.fullMetrics = h } }

// serveMetrics picks the /metrics view for the request's identity.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.sec.fullMetrics != nil {
		if id, ok := r.Context().Value(identityKey{}).(identity); ok && id.role != auth.RoleNode && id.atLeast(auth.RoleOperator) {
			s.sec.fullMetrics.ServeHTTP(w, r)
			return
		}
	}
	s.metrics.ServeHTTP(w, r)
}

// certSerial returns the serial (canonical hex) of a PEM certificate, or
// "" when it cannot be read.
func certSerial(certPEM []byte) string {
	blk, _ := pem.Decode(certPEM)
	if blk == nil {
		return ""
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return ""
	}
	return auth.Serial(c)
}

// ownUsage keeps the usage samples node may report: those of attempts it
// ran (controller.UsageFromNode; for an attempt since requeued, the
// attempt's nodes in accounting). The others are dropped, acknowledged
// (a node must not re-send them forever) and logged: a sample for
// another node's job or for no job is a lie or a bug. seen[i] belongs to
// samples[i].
func (s *Server) ownUsage(ctx context.Context, node string, samples []accounting.UsageSample, seen []controller.UsageSeen) ([]accounting.UsageSample, []controller.UsageSeen, error) {
	if len(samples) == 0 {
		return samples, seen, nil
	}
	refs := make([]controller.UsageRef, len(samples))
	for i, u := range samples {
		refs[i] = controller.UsageRef{JobID: u.JobID, Attempt: u.Attempt}
	}
	verdicts, err := s.c.UsageFromNode(ctx, node, refs)
	if err != nil {
		return nil, nil, err
	}
	var history map[spec.JobID][]accounting.Attempt
	var ask []spec.JobID
	for i, v := range verdicts {
		if v == controller.UsageAskHistory && !slices.Contains(ask, samples[i].JobID) {
			ask = append(ask, samples[i].JobID)
		}
	}
	if len(ask) > 0 && s.acct != nil {
		if history, err = s.acct.Attempts(ctx, ask); err != nil {
			return nil, nil, spec.Errorf(spec.ErrUnavailable, "check the nodes of %d earlier job attempts: %v; the node retries", len(ask), err)
		}
	}
	keptS, keptU := samples[:0:0], seen[:0:0]
	refused := 0
	for i, v := range verdicts {
		ok := v == controller.UsageAllowed
		if v == controller.UsageAskHistory {
			for _, a := range history[samples[i].JobID] {
				ok = ok || a.Attempt == samples[i].Attempt && slices.Contains(a.Nodes, node)
			}
		}
		if !ok {
			if refused == 0 {
				s.log.Warn("usage samples for jobs not allocated to this node refused", "node", node,
					"job_id", samples[i].JobID, "attempt", samples[i].Attempt, "sample", samples[i].ID)
			}
			refused++
			continue
		}
		keptS, keptU = append(keptS, samples[i]), append(keptU, seen[i])
	}
	if refused > 1 {
		s.log.Warn("usage samples refused in one batch", "node", node, "count", refused)
	}
	return keptS, keptU, nil
}
