package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAllocEventAppendJSONMatchesMarshal: an event, and an events
// request, encode by hand to exactly json.Marshal's bytes (random events
// with every field of AllocEvent and UsageSample filled at times, a field
// added later included: randValue fails on a kind it does not know), or
// refuse exactly where json.Marshal fails. DecodeAllocEvent reads each
// back as encoding/json does.
func TestAllocEventAppendJSONMatchesMarshal(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for range 3000 {
		var req EventsRequest
		randValue(t, r, reflect.ValueOf(&req).Elem(), 0)
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := req.appendJSON([]byte("x"))
		if !ok || !bytes.Equal(got[1:], want) {
			t.Fatalf("appendJSON (ok %v) differs from json.Marshal:\n got %s\nwant %s", ok, got[1:], want)
		}
		for i := range req.Events {
			want, _ := json.Marshal(req.Events[i])
			got, ok := req.Events[i].AppendJSON(nil)
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("AppendJSON (ok %v) differs from json.Marshal:\n got %s\nwant %s", ok, got, want)
			}
			var std, fast AllocEvent
			if err := json.Unmarshal(got, &std); err != nil {
				t.Fatal(err)
			}
			if !DecodeAllocEvent(got, &fast) {
				t.Fatalf("DecodeAllocEvent refused what AppendJSON wrote: %s", got)
			}
			if !reflect.DeepEqual(std, fast) {
				t.Fatalf("DecodeAllocEvent differs from encoding/json (-want +got):\n%s", cmp.Diff(std, fast))
			}
		}
	}
	// Where encoding/json refuses, so does the hand-written encoder.
	bad := []EventsRequest{
		{Events: []AllocEvent{{Kind: EventUsage, Usage: &UsageSample{PowerW: math.NaN()}}}},
		{Events: []AllocEvent{{Kind: EventUsage, Usage: &UsageSample{MemPeakMiB: math.Inf(1)}}}},
		{Now: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600))},
	}
	for _, req := range bad {
		if _, err := json.Marshal(req); err == nil {
			t.Fatalf("json.Marshal takes %+v; pick a request it refuses", req)
		}
		if b, ok := req.appendJSON(nil); ok {
			t.Errorf("appendJSON wrote %s where json.Marshal fails", b)
		}
	}
	if DecodeAllocEvent([]byte(`{"seq":1,"new":2}`), new(AllocEvent)) {
		t.Error("DecodeAllocEvent took an unknown key")
	}
}

// TestAppendJSONFloat: encoding/json's float64 form, over magnitudes
// where it switches between 'f' and 'e'.
func TestAppendJSONFloat(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	fs := []float64{0, math.Copysign(0, -1), 1, -1, 1e-6, 1e-7, 9.99e-7, 1e20, 1e21, 1e-10, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64}
	for range 20000 {
		fs = append(fs, math.Float64frombits(r.Uint64()), r.Float64()*math.Pow(10, float64(r.IntN(60)-30)))
	}
	for _, f := range fs {
		want, err := json.Marshal(f)
		got, ok := appendJSONFloat(nil, f)
		if (err == nil) != ok || (ok && !bytes.Equal(got, want)) {
			t.Fatalf("appendJSONFloat(%v) = %s, %v; json.Marshal %s, %v", f, got, ok, want, err)
		}
	}
}

// BenchmarkEventsRequestEncode is a node's request with an exited event
// and a usage sample, by hand and by encoding/json.
func BenchmarkEventsRequestEncode(b *testing.B) {
	now := time.Now()
	req := EventsRequest{Now: now, Events: []AllocEvent{
		{Seq: 41, Node: "node0001", AllocID: "a-1001-1", JobID: 1001, Kind: EventExited, State: "COMPLETED"},
		{Seq: 42, Node: "node0001", AllocID: "a-1002-1", JobID: 1002, Kind: EventUsage, Usage: &UsageSample{ID: "a-1002-1", Attempt: 1,
			GPUs: 1, GPUUtilAvg: 87.5, GPUUtilMax: 99, GPUMemMiB: 40960, PowerW: 412.25, EnergyJ: 4122.5, CPUSeconds: 9.87, MemMiB: 2048}},
	}}
	for _, how := range []string{"appendJSON", "encoding-json"} {
		b.Run(how, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if how == "appendJSON" {
					if _, ok := req.appendJSON(make([]byte, 0, 64+384*len(req.Events))); !ok {
						b.Fatal("refused")
					}
				} else if _, err := json.Marshal(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
