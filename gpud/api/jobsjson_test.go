package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/gpud/spec"
)

// stdDecode is what encoding/json makes of a body, without the fast path.
func stdDecode(b []byte) (JobsResponse, error) {
	type plain JobsResponse
	var p plain
	err := json.Unmarshal(b, &p)
	return JobsResponse(p), err // partial on type errors, like Unmarshal
}

// populate sets every field reachable from v to a non-zero value, so a
// field added to spec.Job that the fast decoder does not know shows up.
func populate(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[spec.Time]() {
			v.Set(reflect.ValueOf(spec.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 6000+seed, time.UTC))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				populate(v.Field(i), seed+i)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		populate(v.Elem(), seed)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		populate(v.Index(0), seed)
		populate(v.Index(1), seed+1)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[spec.Duration]() {
			v.SetInt(int64(time.Duration(seed+1) * time.Second))
			return
		}
		v.SetInt(int64(seed + 1))
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed + 1))
	case reflect.Float64:
		v.SetFloat(0.25)
	default:
		panic("populate: add " + v.Kind().String())
	}
}

func fullJob() spec.Job {
	var j spec.Job
	populate(reflect.ValueOf(&j).Elem(), 1)
	return j
}

func decodeFast(t *testing.T, body []byte) (JobsResponse, *jobsDecoder) {
	t.Helper()
	d := &jobsDecoder{data: body, interned: map[string]string{}}
	jobs, ok := d.response()
	if !ok {
		t.Fatalf("fast path gave up on %s", body)
	}
	return JobsResponse{Jobs: jobs}, d
}

// TestJobsFastPathKnowsEveryField fails when spec.Job gains a field the
// hand-written decoder does not read: add it to jobsDecoder.job.
func TestJobsFastPathKnowsEveryField(t *testing.T) {
	t.Parallel()
	j := fullJob()
	b := j.AppendBriefJSON(nil)
	full, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"jobs":[` + string(full) + `]}`, `{"jobs":[` + string(b) + `,` + string(full) + "]}\n"} {
		got, d := decodeFast(t, []byte(body))
		if d.fallbacks != 0 {
			t.Fatalf("%d jobs went to encoding/json; does jobsDecoder.job know every key of %s?", d.fallbacks, full)
		}
		want, err := stdDecode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("fast decode differs from encoding/json (-want +got):\n%s", cmp.Diff(want, got))
		}
	}
}

func TestJobsResponseUnmarshal(t *testing.T) {
	t.Parallel()
	full, _ := json.Marshal(fullJob())
	tests := []struct {
		name      string
		body      string
		fallbacks int  // job objects the fast path hands over
		whole     bool // the fast path gives up on the body
	}{
		{name: "empty", body: `{"jobs":[]}`},
		{name: "null", body: `{"jobs":null}`},
		{name: "white space", body: " {\n\"jobs\" : [ {\"id\" : 1 , \"nodes\" : [ \"a\" , \"b\" ] } , { } ] } \n"},
		{name: "full", body: `{"jobs":[` + string(full) + `]}`},
		{name: "brief pending", body: `{"jobs":[{"id":7,"name":"bench","user":"root","state":"PENDING","reason":"Priority","submit_time":"2026-11-30T06:31:13.984412569Z"}]}`},
		{name: "escapes and unicode", body: `{"jobs":[{"id":1,"name":"a\"b\\c\u00e9\n","user":"jürgen","comment":"<&>","nodes":["n\u0031"]}]}`},
		{name: "invalid utf-8 becomes U+FFFD", body: "{\"jobs\":[{\"id\":1,\"name\":\"a\xffb\"}]}"},
		{name: "nulls", body: `{"jobs":[{"id":1,"nodes":null,"gpus":null,"alloc":null,"start_time":null,"time_limit":null,"name":null}]}`, fallbacks: 1},
		{name: "alloc", body: `{"jobs":[{"id":1,"alloc":{"id":"a1","job_id":1,"nodes":[{"node":"n1","rank":0,"cpus":2,"mem_mib":10,"gpus":["GPU-1"]}],"start_time":"2026-01-01T00:00:00Z"}}]}`},
		{name: "case-folded key", body: `{"jobs":[{"ID":3,"Name":"x"},{"id":4}]}`, fallbacks: 1},
		{name: "unknown key", body: `{"jobs":[{"id":3,"new_field":{"a":[1,2,{"b":"}"}]}}]}`, fallbacks: 1},
		{name: "offset time", body: `{"jobs":[{"id":3,"submit_time":"2026-01-01T01:00:00+01:00"}]}`},
		{name: "float fraction", body: `{"jobs":[{"id":3,"resources":{"gpu_fraction":2.5e-1,"nodes":2,"nodelist":["a"]}}]}`},
		{name: "unknown top-level key", body: `{"more":1,"jobs":[{"id":1}]}`, whole: true},
		{name: "bad number", body: `{"jobs":[{"id":1.5}]}`, whole: true},
		{name: "negative id", body: `{"jobs":[{"id":-1}]}`, whole: true},
		{name: "uid overflow", body: `{"jobs":[{"id":1,"uid":4294967296}]}`, whole: true},
		{name: "leading zero", body: `{"jobs":[{"id":01}]}`, whole: true},
		{name: "trailing garbage", body: `{"jobs":[]} x`, whole: true},
		{name: "truncated", body: `{"jobs":[{"id":1,"name":"x`, whole: true},
		{name: "control character", body: "{\"jobs\":[{\"id\":1,\"name\":\"a\tb\"}]}", whole: true},
		{name: "wrong type", body: `{"jobs":[{"id":"1"}]}`, whole: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, wantErr := stdDecode([]byte(tc.body))
			var got JobsResponse
			err := json.Unmarshal([]byte(tc.body), &got)
			if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("error %v, encoding/json gives %v", err, wantErr)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("differs from encoding/json (-want +got):\n%s", cmp.Diff(want, got))
			}
			d := &jobsDecoder{data: []byte(tc.body), interned: map[string]string{}}
			_, ok := d.response()
			if ok == tc.whole || (ok && d.fallbacks != tc.fallbacks) {
				t.Fatalf("fast path ok=%v with %d fallbacks; want ok=%v with %d", ok, d.fallbacks, !tc.whole, tc.fallbacks)
			}
		})
	}
}

func FuzzJobsResponseUnmarshal(f *testing.F) {
	full, _ := json.Marshal(fullJob())
	j := fullJob()
	f.Add([]byte(`{"jobs":[` + string(full) + `]}`))
	f.Add([]byte(`{"jobs":[` + string(j.AppendBriefJSON(nil)) + `]}`))
	f.Add([]byte(`{"jobs":[{"id":1,"name":"a\"b","nodes":null,"resources":{"gpu_fraction":0.5}},{}]}`))
	f.Add([]byte(`{"jobs":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantErr := stdDecode(body)
		var got JobsResponse
		err := got.UnmarshalJSON(body)
		if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("error %v, encoding/json gives %v", err, wantErr)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("differs from encoding/json (-want +got):\n%s", cmp.Diff(want, got))
		}
	})
}

func BenchmarkJobsResponseUnmarshal100k(b *testing.B) {
	for _, view := range []string{"full", "brief"} {
		b.Run(view, func(b *testing.B) {
			var sb strings.Builder
			sb.WriteString(`{"jobs":[`)
			for i := range 100000 {
				j := spec.Job{ID: spec.JobID(i + 1), JobSpec: spec.JobSpec{Name: "bench", WorkDir: "/tmp", SubmitDir: "/tmp", Requeue: true},
					User: "root", State: spec.StatePending, Reason: spec.ReasonPriority, SubmitTime: spec.NewTime(time.Now())}
				if i > 0 {
					sb.WriteByte(',')
				}
				if view == "brief" {
					sb.Write(j.AppendBriefJSON(nil))
				} else {
					enc, _ := json.Marshal(j)
					sb.Write(enc)
				}
			}
			sb.WriteString("]}\n")
			body := []byte(sb.String())
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var r JobsResponse
				if err := r.UnmarshalJSON(body); err != nil || len(r.Jobs) != 100000 {
					b.Fatal(err)
				}
			}
		})
	}
}
