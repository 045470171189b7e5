package slurmrest_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// Benchmarks of Slurm's API beside gpud's own /v1, both over TLS with a
// token, on the same controller:
//
//	go test -run '^$' -bench 'SlurmREST' -benchtime 20x ./gpud/slurmrest/
//
// GetJobs10k lists 10,000 pending jobs; Submit8 submits from 8 clients.
// Slurm's documents are not needed (nothing is validated while timing).

func submitN(b *testing.B, ctl *controller.Controller, n int) {
	b.Helper()
	ctx := context.Background()
	who := controller.Caller{UID: 1001, GID: 1001, User: "alice", Known: true}
	js := spec.JobSpec{Name: "bench", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Requeue: true, Hold: true,
		Resources: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: 1}}
	for range n {
		if _, err := ctl.Submit(ctx, who, js); err != nil {
			b.Fatal(err)
		}
	}
}

func get(b *testing.B, hc *http.Client, url, hdr, tok string) time.Duration {
	start := time.Now()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set(hdr, tok)
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n < 1000 {
		b.Fatalf("GET %s: %d, %d bytes", url, resp.StatusCode, n)
	}
	return time.Since(start)
}

func percentiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	p := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(p(0.5), "p50-ms")
	b.ReportMetric(p(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkSlurmRESTGetJobs10k(b *testing.B) {
	c := startCluster(b)
	submitN(b, c.ctl, 10000)
	tok := c.token(b, ada)
	for _, api := range []struct{ name, url, hdr, val string }{
		{"slurm-v0.0.45", c.https + "/slurm/v0.0.45/jobs/", "X-SLURM-USER-TOKEN", tok},
		{"slurm-v0.0.42", c.https + "/slurm/v0.0.42/jobs/", "X-SLURM-USER-TOKEN", tok},
		{"v1", c.https + "/v1/jobs", "Authorization", "Bearer " + tok},
	} {
		b.Run(api.name, func(b *testing.B) {
			get(b, c.hc, api.url, api.hdr, api.val) // warm the connection
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				ds = append(ds, get(b, c.hc, api.url, api.hdr, api.val))
			}
			percentiles(b, ds)
		})
	}
}

func BenchmarkSlurmRESTSubmit8(b *testing.B) {
	c := startCluster(b)
	tok := c.token(b, alice)
	slurmBody := []byte(`{"script":"#!/bin/sh\ntrue\n","job":{"name":"b","current_working_directory":"/tmp","environment":["PATH=/bin"],"tres_per_node":"gres/gpu:1","hold":true}}`)
	v1Body := []byte(`{"job":{"name":"b","script":"#!/bin/sh\ntrue\n","work_dir":"/tmp","hold":true,"resources":{"nodes":1,"gpus_per_node":1}}}`)
	for _, api := range []struct {
		name, url, hdr, val string
		body                []byte
	}{
		{"slurm-v0.0.45", c.https + "/slurm/v0.0.45/job/submit", "X-SLURM-USER-TOKEN", tok, slurmBody},
		{"v1", c.https + "/v1/jobs", "Authorization", "Bearer " + tok, v1Body},
	} {
		b.Run(api.name, func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			b.ResetTimer()
			for range 8 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						req, _ := http.NewRequest("POST", api.url, bytes.NewReader(api.body))
						req.Header.Set(api.hdr, api.val)
						req.Header.Set("Content-Type", "application/json")
						resp, err := c.hc.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							b.Errorf("submit: %d", resp.StatusCode)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}
