package api

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/gpud/spec"
)

// submitBodies are submissions as clients write them and as people and
// scripts might (the REST API takes any JSON): each row's body is
// compared below.
var submitBodies = []string{
	`{}`,
	`{"job":{}}`,
	`{"job":{"name":"a","resources":{"nodes":1,"cpus_per_node":1,"mem_mib_per_node":0,"gpus_per_node":1},"time_limit":60,"script":"#!/bin/sh\ntrue\n","work_dir":"/tmp","submit_dir":"/tmp","begin_time":null,"requeue":false}}`,
	`{"job":{"name":"a"},"het":null}`,
	`{"job":{"name":"a"},"het":[]}`,
	`{"job":{"name":"a"},"het":[{"name":"b"},{"name":"c","tasks":{"ntasks":2}}],"test_only":true}`,
	`{"job":{"container":{"mounts":["/a:/b"],"readonly":true}}}`,
	`{"job":{"container":null}}`,
	`{"job":{"begin_time":"2026-01-02T03:04:05Z","time_min":30,"checkpoint_interval":600}}`,
	`{"job":{"nice":-5,"resources":{"gpu_fraction":0.25,"nodelist":null,"exclude":["n1"]}}}`,
	` { "job" : { "name" : "spaced" } } `,
	// Left to encoding/json, which takes them:
	`{"Job":{"name":"case-folded key"}}`,
	`{"job":{"NAME":"x"}}`,
	`{"job":{"name":"dup","name":"last"}}`,
	`{"job":{"resources":{"nodes":1},"resources":{"gpus_per_node":2}}}`,
	`{"job":{"name":"a"},"het":[{"name":"b","qos":"q"}],"het":[{"name":"c"}]}`,
	`{"job":null}`,
	`{"job":{"name":null,"resources":null,"tasks":null,"args":null}}`,
	`{"job":{"name":"\u00e9t\u00e9","script":"caf\u00e9 \\ \"q\""}}`,
	`{"job":{"name":"été"}}`,
	`{"job":{"time_limit":60.0}}`,
	`{"job":{"time_limit":1e2}}`,
	`{"job":{"resources":{"gpu_fraction":1}}}`,
	// Left to encoding/json, which refuses them with its own error:
	`{"job":{"name":"a","bogus":1}}`,
	`{"job":{},"idempotency_key":"k"}`,
	`{"job":{},"IdempotencyKey":"k"}`,
	`{"job":{"resources":{"nodes":"1"}}}`,
	`{"job":{"resources":{"nodes":1.5}}}`,
	`{"job":{"resources":{"nodes":99999999999999999999}}}`,
	`{"job":{"nice":true}}`,
	`{"job":{"time_limit":"1h"}}`,
	`{"job":{"time_limit":99999999999999999}}`,
	`{"job":{"begin_time":"tomorrow"}}`,
	`{"job":{"container":{"mounts":["/a"],"bogus":true}}}`,
	`{"job":{"tasks":{"ntasks":1,"x":2}}}`,
	`{"job":{"resources":{"gpu_fraction":1e999}}}`,
	`{"job":{}} {}`,
	`{"job":{}}x`,
	`{"job":{}`,
	`[]`,
	`null`,
	``,
	`{"test_only":"yes"}`,
	`{"het":{}}`,
	`{"job":{"args":["a",1]}}`,
	`{"job":{"env":"A=1"}}`,
}

// checkSubmitDecode compares DecodeSubmitRequest with the server's strict
// encoding/json decoding of body: where the fast path takes a body it
// gives exactly what encoding/json gives (which must take it too); where
// it does not, it leaves the request zero, and the server decodes the
// body with encoding/json as before (same value, same error).
func checkSubmitDecode(t *testing.T, body []byte) (fast bool) {
	t.Helper()
	var got SubmitRequest
	ok := DecodeSubmitRequest(body, &got)
	var want SubmitRequest
	err := strictDecode(body, &want)
	if !ok {
		if !reflect.DeepEqual(got, SubmitRequest{}) {
			t.Fatalf("DecodeSubmitRequest refused %s but left %+v (the server decodes into it again)", body, got)
		}
		return false
	}
	if err != nil {
		t.Fatalf("DecodeSubmitRequest took %s, which encoding/json refuses: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeSubmitRequest(%s)\n got %+v\nwant %+v", body, got, want)
	}
	return true
}

func TestDecodeSubmitRequestMatchesEncodingJSON(t *testing.T) {
	fast, fallbacks := 0, 0
	count := func(ok bool) {
		if ok {
			fast++
		} else {
			fallbacks++
		}
	}
	for _, body := range submitBodies {
		count(checkSubmitDecode(t, []byte(body)))
	}
	// What the clients write (SubmitRequest.MarshalJSON) is always taken
	// by the fast path; mutations of it are taken or left.
	r := rand.New(rand.NewPCG(3, 4))
	mutations := [][2]string{
		{`"name":`, `"Name":`},
		{`"script":`, `"bogus":1,"script":`},
		{`"work_dir":`, `"work_dir":"dup","work_dir":`},
		{`"qos":"`, `"qos":null,"x":"`},
		{`"nodes":`, `"nodes":1.5,"y":`},
		{"", " {}"}, // appended: trailing data
		{`"resources":{`, `"resources":{"nodes":2,`},
		{`"job":{`, "\n\t\"job\" : { "},
		{`"time_limit":`, `"time_limit":99999999999999999999,"z":`},
		{`"account":`, `"account":"a","het":[],"account":`},
	}
	mutate := func(body []byte) []byte { return mutateOnce(r, body, mutations) }
	for range 3000 {
		var req SubmitRequest
		randValue(t, r, reflect.ValueOf(&req).Elem(), 0)
		req.IdempotencyKey = "" // never written (a header)
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var got SubmitRequest
		if !DecodeSubmitRequest(body, &got) {
			t.Fatalf("DecodeSubmitRequest refused what SubmitRequest.MarshalJSON writes: %s", body)
		}
		count(checkSubmitDecode(t, body))
		count(checkSubmitDecode(t, mutate(body)))
	}
	if fast < 3000 || fallbacks < 300 {
		t.Fatalf("fast path %d, fallbacks %d: the comparisons are not what they should be", fast, fallbacks)
	}
}

func FuzzDecodeSubmitRequest(f *testing.F) {
	for _, b := range submitBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // the server refuses it before either decoder
		}
		checkSubmitDecode(t, body)
	})
}

func BenchmarkDecodeSubmitRequest(b *testing.B) {
	req := SubmitRequest{Job: spec.JobSpec{Name: "loadtest", Partition: "gpu", Account: "lab",
		Resources: spec.Resources{Nodes: 1, CPUsPerNode: 1, MemMiB: 1024, GPUsPerNode: 1}, TimeLimit: spec.Duration(time.Hour),
		Script: "#!/bin/sh\nsleep 5\n", Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/alice", "USER=alice"}, WorkDir: "/home/alice", SubmitDir: "/home/alice",
		SubmitHost: "login1", Requeue: true}}
	body, _ := json.Marshal(req)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got SubmitRequest
			if err := strictDecode(body, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeSubmitRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got SubmitRequest
			if !DecodeSubmitRequest(body, &got) {
				b.Fatal("refused")
			}
		}
	})
}
