package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// randValue sets v to a random value, recursively (zero about a third of
// the time), for the kinds an events request holds; another kind fails
// the test, so a field added to AllocEvent or UsageSample is filled or
// noticed.
func randValue(t *testing.T, r *rand.Rand, v reflect.Value, depth int) {
	t.Helper()
	if r.IntN(3) == 0 {
		return
	}
	switch v.Interface().(type) {
	case spec.Time:
		v.Set(reflect.ValueOf(spec.NewTime(time.Unix(1.7e9+r.Int64N(1e6), r.Int64N(1e9)).UTC())))
		return
	case time.Time:
		v.Set(reflect.ValueOf(time.Unix(1.7e9+r.Int64N(1e6), r.Int64N(1e9)).In(time.FixedZone("X", 3600*r.IntN(3)))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		strs := []string{"a", "started", "exited", "COMPLETED", "<&>", "é", `q"b\`, "\x02", "node0001", "GPU-1/2"}
		v.SetString(strs[r.IntN(len(strs))])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt([]int64{1, -1, 9, 1 << 40}[r.IntN(4)])
	case reflect.Uint64:
		v.SetUint([]uint64{1, 77, 1 << 63}[r.IntN(3)])
	case reflect.Float64:
		v.SetFloat([]float64{0.5, 99.25, 1e-9, 3e21, 12345.678}[r.IntN(5)])
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		randValue(t, r, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		n := r.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			randValue(t, r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			randValue(t, r, v.Field(i), depth+1)
		}
	default:
		t.Fatalf("randValue: kind %s (%s) is not known here: give it values", v.Kind(), v.Type())
	}
}

// strictDecode is the server's decoding of a request body (decodeBytes).
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errTrailing
	}
	return nil
}

var errTrailing = json.Unmarshal([]byte("{} x"), new(any))

func TestDecodeEventsRequestMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	fast, fallbacks := 0, 0
	compare := func(body []byte) {
		t.Helper()
		var got EventsRequest
		ok := DecodeEventsRequest(body, &got)
		var want EventsRequest
		err := strictDecode(body, &want)
		if !ok {
			if !reflect.DeepEqual(got, EventsRequest{}) {
				t.Fatalf("DecodeEventsRequest refused %s but left %+v (the server decodes into it again)", body, got)
			}
			fallbacks++
			return
		}
		fast++
		if err != nil {
			t.Fatalf("DecodeEventsRequest took %s, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeEventsRequest(%s)\n got %+v\nwant %+v", body, got, want)
		}
	}
	// Mutations of a valid body: each either still decodes to what
	// encoding/json gives, or is left to it.
	mutations := [][2]string{
		{`"seq":`, `"Seq":`},
		{`"kind":`, `"bogus":1,"kind":`},
		{`"node":`, `"node":"dup","node":`},
		{`"state":"`, `"state":null,"x":"`},
		{`"exit_code":`, `"exit_code":1.5,"y":`},
		{"", " {}"}, // appended: trailing data
		{`"usage":{`, `"usage":{"id":"u1",`},
		{`"events":[`, "\n\t\"events\" : [ "},
		{`"ckpt_seq":`, `"ckpt_seq":99999999999999999999,"z":`},
	}
	mutate := func(body []byte) []byte { return mutateOnce(r, body, mutations) }
	compare([]byte(`{}`))
	compare([]byte(`{"events":null}`))
	compare([]byte(`{"events":[]}`))
	for range 3000 {
		var req EventsRequest
		randValue(t, r, reflect.ValueOf(&req).Elem(), 0)
		body, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		var got EventsRequest
		if !DecodeEventsRequest(body, &got) {
			t.Fatalf("DecodeEventsRequest refused what json.Marshal writes: %s", body)
		}
		compare(body)
		compare(mutate(body))
	}
	if fast < 3000 || fallbacks == 0 {
		t.Fatalf("fast path %d, fallbacks %d: the comparisons are not what they should be", fast, fallbacks)
	}
}

func BenchmarkDecodeEventsRequest(b *testing.B) {
	now := time.Unix(1.7e9, 0).UTC()
	req := EventsRequest{Now: now, Events: []AllocEvent{
		{Seq: 41, Node: "node0001", AllocID: "a-123-1", JobID: 123, Kind: "started", Time: spec.NewTime(now)},
		{Seq: 42, Node: "node0001", AllocID: "a-124-1", JobID: 124, Kind: "exited", Time: spec.NewTime(now), State: spec.StateCompleted},
		{Seq: 43, Node: "node0001", AllocID: "a-125-1", JobID: 125, Kind: "usage", Time: spec.NewTime(now),
			Usage: &UsageSample{ID: "a-125-1", Attempt: 1, Start: spec.NewTime(now), End: spec.NewTime(now), GPUs: 1, GPUUtilAvg: 50, GPUUtilMax: 90, PowerW: 300, EnergyJ: 3000, CPUSeconds: 10, MemMiB: 1024}},
	}}
	body, _ := json.Marshal(&req)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got EventsRequest
			if err := strictDecode(body, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeEventsRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got EventsRequest
			if !DecodeEventsRequest(body, &got) {
				b.Fatal("refused")
			}
		}
	})
}

// mutateOnce makes one of mutations, picked by r, in a valid JSON body:
// {old, new} replaces the first old with new; {"", new} appends new. The
// hand decoders' equivalence tests feed such bodies (case-folded,
// unknown, repeated and null keys, wrong types, overflows, trailing
// data), which each decoder must either decode as encoding/json does or
// leave to it.
func mutateOnce(r *rand.Rand, body []byte, mutations [][2]string) []byte {
	m := mutations[r.IntN(len(mutations))]
	if m[0] == "" {
		return append(body, m[1]...)
	}
	return []byte(strings.Replace(string(body), m[0], m[1], 1))
}
