package server_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
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
	c := aliceTLSClient(b, s)
	submitParallel8With(b, c, false)
}

// BenchmarkGetJobParallel8TLS is the API's per-request cost without the
// handler's own work: 8 clients over one TLS HTTP/2 connection (as
// BenchmarkSubmitParallel8TLS) each asking for one small job again and
// again, so every call passes edge, authentication, the tally and the
// instrumentation and its answer is a few hundred bytes. Its cpu-µs/op is
// the whole process's (server and clients) per call.
func BenchmarkGetJobParallel8TLS(b *testing.B) {
	s := secureServerWith(b, nil)
	c := aliceTLSClient(b, s)
	ctx := context.Background()
	js := jobSpec("bench")
	js.Hold = true
	res, err := c.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Job(ctx, res.ID); err != nil { // the connection is up
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ResetTimer()
	cpu0 := processCPU(b)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if j, err := c.Job(ctx, res.ID); err != nil || j.ID != res.ID {
					b.Errorf("job %d: got %d, %v", res.ID, j.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// aliceTLSClient is an API client of alice's over s's TLS port (one
// HTTP/2 connection), with no stray ~/.config/gpud or token variable.
func aliceTLSClient(b *testing.B, s secure) *api.Client {
	tok, err := s.keys.Issue(auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.Setenv("HOME", b.TempDir())
	b.Setenv(api.EnvToken, "")
	c, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: s.ca, Token: tok})
	if err != nil {
		b.Fatal(err)
	}
	return c
}
