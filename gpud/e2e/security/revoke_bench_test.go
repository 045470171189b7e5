package security

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// BenchmarkRevocationLatency10Nodes (issue 24): a 10-node gpud standalone
// with its nodes over the network. Each iteration mints a node
// certificate, has a prober per node present it to that node's step
// listener every 20 ms (admitted, then refused as revoked: the listener
// judges the credential before anything else), lists its serial in
// [auth] revoked_node_certs and runs gpuq reconfigure; a sample is the
// time from the start of gpuq reconfigure to a node's first refusal.
// Reports p50, p99 and the largest over all samples (10 per iteration).
func BenchmarkRevocationLatency10Nodes(b *testing.B) {
	const nodes = 10
	rc := startRevokeCluster(b, nodes)
	addrs := rc.stepAddrs()
	var revoked []string
	var samples []time.Duration
	for b.Loop() {
		cert, serial := rc.mint("node1")
		probe := api.StepHello{Alloc: "none", Part: &api.StepPart{Tasks: []int{0}, Args: []string{"true"}}}
		// Each prober first sees the certificate admitted (the node then
		// says it runs no such allocation).
		for name, addr := range addrs {
			if _, refused, err := stepOutput(addr, name, rc.pool, &cert, probe); err != nil || !strings.Contains(refused, "runs no part") {
				b.Fatalf("node %s before the revocation: %q, %v", name, refused, err)
			}
		}
		revoked = append(revoked, serial)
		rc.writeRevoked(revoked, nil)
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for name, addr := range addrs {
			wg.Go(func() {
				for time.Since(start) < 60*time.Second {
					_, refused, err := stepOutput(addr, name, rc.pool, &cert, probe)
					if err == nil && strings.Contains(refused, "was revoked") {
						mu.Lock()
						samples = append(samples, time.Since(start))
						mu.Unlock()
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				b.Errorf("node %s still admits the revoked certificate 60 s after gpuq reconfigure", name)
			})
		}
		rc.reconfigure()
		wg.Wait()
	}
	slices.Sort(samples)
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
	fmt.Printf("revocation to refusal at every node's step listener: %d samples over %d nodes: p50 %v, p99 %v, max %v\n",
		len(samples), nodes, pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
}
