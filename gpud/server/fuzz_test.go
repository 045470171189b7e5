package server

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// The fuzz targets run every API request decoder and its edge checks on
// arbitrary bytes: they must never panic, and whatever they accept must
// satisfy the edge rules. Seeds live in testdata/fuzz/<Target>/ and run
// with plain go test.

func FuzzDecodeSubmit(f *testing.F) {
	f.Add([]byte(`{"job":{"name":"a","script":"echo hi\n","work_dir":"/tmp","resources":{"nodes":2,"gpus_per_node":8}}}`))
	f.Add([]byte(`{"job":{"name":"a\u0000","output":"../x"},"test_only":true}`))
	f.Add([]byte(`{"job":{"time_limit":9223372036854775807,"checkpoint_interval":18000000000,"nice":-2147483648}}`))
	f.Add([]byte(`{"job":{"time_limit":3155760000,"begin_time":"2199-12-31T23:59:59Z","resources":{"mem_mib_per_node":1073741824,"nodes":2147483648}}}`))
	f.Add([]byte(`{"job":{"comment":"\u001b]0;x\u0007","args":["a\nb","\u009b"],"resources":{"gpu_fraction":1e308}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The handler's decoding (by hand, else encoding/json) gives what
		// encoding/json alone gives: the same request or the same error.
		var req, want api.SubmitRequest
		err := decodeBytesWith(b, &req, func(b []byte) bool { return api.DecodeSubmitRequest(b, &req) })
		wantErr := decodeBytes(b, &want)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(req, want) {
			t.Fatalf("submission %q decodes to %+v, %v; encoding/json gives %+v, %v", b, req, err, want, wantErr)
		}
		if err != nil {
			return
		}
		if checkJobSpec(&req.Job) != nil {
			return
		}
		js := req.Job
		for _, v := range append([]string{js.Name, js.Script, js.Output, js.Error, js.WorkDir}, js.Env...) {
			if strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("accepted a NUL byte in %q", v)
			}
		}
		for _, p := range []string{js.Output, js.Error, js.WorkDir, js.SubmitDir} {
			if p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
				t.Fatalf("accepted path traversal %q", p)
			}
		}
		if len(js.Name) > maxShort || strings.IndexFunc(js.Name, isControl) >= 0 {
			t.Fatalf("accepted name %q", js.Name)
		}
		for _, v := range []string{js.Comment, js.Name, js.Partition, js.Account, js.QOS, js.Output, js.Error, js.WorkDir, js.Image,
			js.Array, js.Depend, js.Signal, js.Resources.Constraint, js.Resources.GPUModel} {
			if strings.IndexFunc(v, isControl) >= 0 {
				t.Fatalf("accepted a control character in %q", v)
			}
		}
		checkRanges(t, &js)
	})
}

// A job's bounds are spec.JobSpec.Validate's.
const (
	maxNodes   = spec.MaxNodes
	maxGPUsAll = spec.MaxTotalGPUs
	maxRDMA    = spec.MaxRDMA
	maxNice    = spec.MaxNice
)

// checkRanges asserts that an accepted job's numbers are in range and
// convert without overflow: durations to time.Duration and back to the
// same whole seconds, sizes to bytes, the begin time to UnixNano.
func checkRanges(t *testing.T, js *spec.JobSpec) {
	t.Helper()
	for name, d := range map[string]spec.Duration{"time_limit": js.TimeLimit, "checkpoint_interval": js.Ckpt} {
		std := d.Std()
		if std < 0 || std > maxSeconds*time.Second || std%time.Second != 0 {
			t.Fatalf("accepted %s = %v", name, std)
		}
		// Added to any accepted begin time it stays a later instant.
		if end := maxBegin.Add(std); end.Before(maxBegin) || end.Year() > 2400 {
			t.Fatalf("%s = %v overflows after a begin time", name, std)
		}
	}
	r := js.Resources
	if r.MemMiB > maxMemMiB || r.MemMiB < -maxMemMiB || r.MemMiB<<20>>20 != r.MemMiB {
		t.Fatalf("accepted mem_mib_per_node = %d, whose bytes overflow", r.MemMiB)
	}
	// A job's total memory in MiB (nodes × per node) fits an int64.
	if n := int64(r.Nodes); n > maxNodes || n < -maxNodes || (n*maxMemMiB)/maxMemMiB != n {
		t.Fatalf("accepted nodes = %d", r.Nodes)
	}
	for name, v := range map[string]struct{ v, limit int64 }{"cpus": {int64(r.CPUsPerNode), maxCPUs}, "gpus_per_node": {int64(r.GPUsPerNode), maxGPUs},
		"total_gpus": {int64(r.TotalGPUs), maxGPUsAll}, "rdma": {int64(r.RDMA), maxRDMA}, "nice": {int64(js.Nice), maxNice}} {
		if v.v > v.limit || v.v < -v.limit {
			t.Fatalf("accepted %s = %d", name, v.v)
		}
	}
	if f := r.GPUFraction; f != f || f < 0 || f > maxGPUs {
		t.Fatalf("accepted gpu_fraction = %g", f)
	}
	if b := js.BeginTime; !b.IsZero() && (b.Before(minBegin) || !b.Before(maxBegin) || b.UnixNano() < 0) {
		t.Fatalf("accepted begin_time = %v", b)
	}
}

func FuzzDecodeJobAction(f *testing.F) {
	f.Add([]byte(`{"reason":"maintenance"}`))
	f.Add([]byte(`{"reason":"\u001b[2J","signal":"KILL"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.JobActionRequest
		if decodeBytes(b, &req) == nil && checkReason(req.Reason) == nil && strings.IndexFunc(req.Reason, isControl) >= 0 {
			t.Fatalf("accepted reason %q", req.Reason)
		}
		var nreq api.NodeActionRequest
		_ = decodeBytes(b, &nreq)
	})
}

func FuzzDecodeRegister(f *testing.F) {
	f.Add([]byte(`{"inventory":{"name":"n1","addr":"10.0.0.1","cpus":16,"mem_mib":64000,"gpus":[{"index":0,"uuid":"GPU-1","model":"h100"}]}}`))
	f.Add([]byte(`{"inventory":{"name":"../n","cpus":-1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.RegisterRequest
		if decodeBytes(b, &req) != nil || checkInventory(&req.Inventory) != nil {
			return
		}
		if len(req.Inventory.GPUs) > maxGPUs || strings.IndexByte(req.Inventory.Name, 0) >= 0 {
			t.Fatalf("accepted inventory %+v", req.Inventory)
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add([]byte(`{"running":["1.1","2.1"]}`))
	f.Add([]byte(`{"running":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.HeartbeatRequest
		if decodeBytes(b, &req) == nil && checkRunning(req.Running) == nil && len(req.Running) > maxItems {
			t.Fatalf("accepted %d running allocs", len(req.Running))
		}
	})
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add([]byte(`{"events":[{"seq":1,"node":"n1","alloc_id":"1.1","job_id":1,"kind":"exited","time":"2026-01-01T00:00:00Z","state":"FAILED","exit_code":3}]}`))
	f.Add([]byte(`{"events":[{"seq":18446744073709551615,"time":"bogus"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req api.EventsRequest
		if decodeBytes(b, &req) == nil && checkEvents(req.Events) == nil && len(req.Events) > maxEvents {
			t.Fatalf("accepted %d events", len(req.Events))
		}
	})
}

var fuzzKeys, _ = auth.NewKeys([]byte(strings.Repeat("f", 32)), "fuzz")

func FuzzToken(f *testing.F) {
	good, err := fuzzKeys.Issue(auth.Claims{User: "alice", UID: 1001}, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJyb290In0.")
	f.Add("Bearer x.y.z")
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := fuzzKeys.Verify(raw)
		if err != nil {
			return
		}
		// Anything accepted was signed by us: only the seed, re-encoded.
		if c.User != "alice" || c.UID != 1001 || c.Role != auth.RoleUser {
			t.Fatalf("accepted a token we did not issue: %+v", c)
		}
	})
}
