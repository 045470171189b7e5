package server_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
)

// BenchmarkSubmitParallel8TLS is BenchmarkSubmitParallel8Audited as
// gpud loadtest's submitters (and sbatch on another host) submit: over
// TLS with a user's token, the 8 submitters sharing one HTTP/2
// connection, so each call is a new stream and its handler a new
// goroutine; the audit entry rides with the submission's commit. Its
// cpu-µs/op is the whole process's (server, controller, SQLite, audit
// log and the clients).
func BenchmarkSubmitParallel8TLS(b *testing.B) {
	db, err := accounting.Open(filepath.Join(b.TempDir(), "accounting.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	s := secureServerWith(b, nil, server.WithAudit(db, nil))
	tok, err := s.keys.Issue(auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.Setenv("HOME", b.TempDir()) // no stray ~/.config/gpud
	b.Setenv(api.EnvToken, "")
	c, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: s.ca, Token: tok})
	if err != nil {
		b.Fatal(err)
	}
	submitParallel8With(b, c, false)
}
