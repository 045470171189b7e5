package server_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
)

// BenchmarkSubmitOne is the server's share of one `sbatch --hold --wrap
// true` in a shell loop: one submitter, one submission at a time, each on
// a new client and so a new unix-socket connection (as each sbatch
// process makes), with an Idempotency-Key, answered only once the job is
// durable in SQLite (WAL, synchronous=FULL). A lone submission is
// committed at once: there is no batch window, so ns/op is connection
// set-up, the handler, the owner loop's commit and the answer. The
// controller logs as gpud does (JSON) to io.Discard.
func BenchmarkSubmitOne(b *testing.B) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	addr, _, _ := servertest.Start(b, nil, servertest.Options{
		ControllerOptions: []controller.Option{controller.WithLogger(log)},
		ServerOptions:     []server.Option{server.WithLogger(log)}})
	js := jobSpec("sbatch")
	js.Hold = true
	js.Script = "#!/bin/sh\ntrue\n"
	ctx := context.Background()
	var worst time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := api.NewClient(addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: js, IdempotencyKey: api.NewIdempotencyKey()}); err != nil {
			b.Fatal(err)
		}
		c.HTTPClient().CloseIdleConnections()
		worst = max(worst, time.Since(t0))
	}
	b.ReportMetric(float64(worst.Microseconds()), "max-µs")
}
