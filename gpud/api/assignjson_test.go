package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// setSome sets each exported field of the struct v, with probability
// one half, to a non-zero value of its kind (strings that need
// escaping included). A field of a kind it does not know fails the test,
// so a field added to Assignment or AssignmentsResponse is either
// covered here or noticed.
func setSome(t *testing.T, r *rand.Rand, v reflect.Value, seen map[string]bool) {
	t.Helper()
	strs := []string{"a", "<&>", "é", `q"b\`, "\x02", "node0001"}
	job := spec.Job{ID: 7, JobSpec: spec.JobSpec{Name: "n<1>", Partition: "gpu", Resources: spec.Resources{Nodes: 1, GPUsPerNode: 2}, Script: "#!/bin/sh\necho ü\n", Env: []string{"A=1"}},
		User: "alice", State: spec.StateRunning, Nodes: []string{"node0001"}, SubmitTime: spec.NewTime(time.Unix(1.7e9, 5))}
	alloc := spec.Alloc{ID: "a-7-1", JobID: 7, Attempt: 1, Nodes: []spec.NodeAlloc{{Node: "node0001", CPUs: 2, MemMiB: 10, GPUs: []string{"GPU-1", "GPU-2"}, PullMS: 3}},
		StartTime: spec.NewTime(time.Unix(1.7e9, 9))}
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		seen[v.Type().Name()+"."+f.Name] = true
		if r.IntN(2) == 0 {
			continue
		}
		switch fv.Interface().(type) {
		case spec.Job:
			fv.Set(reflect.ValueOf(job))
		case spec.Alloc:
			fv.Set(reflect.ValueOf(alloc))
		case []spec.HetComponent:
			fv.Set(reflect.ValueOf([]spec.HetComponent{{Offset: 0, JobID: 7, Partition: "gpu", Nodes: alloc.Nodes}, {Offset: 1, JobID: 8}}))
		case *Revocations:
			fv.Set(reflect.ValueOf(&Revocations{Version: "v3", Lists: &RevocationLists{Certs: []string{"ab"}}}))
		case time.Time:
			fv.Set(reflect.ValueOf(time.Unix(1.7e9, 123).In(time.FixedZone("X", 3600))))
		case []string:
			fv.Set(reflect.ValueOf(strs[:1+r.IntN(len(strs))]))
		case []Assignment:
			n := r.IntN(4)
			as := make([]Assignment, n)
			for k := range as {
				setSome(t, r, reflect.ValueOf(&as[k]).Elem(), seen)
			}
			fv.Set(reflect.ValueOf(as))
		default:
			switch fv.Kind() {
			case reflect.String:
				fv.SetString(strs[r.IntN(len(strs))])
			case reflect.Bool:
				fv.SetBool(true)
			case reflect.Int, reflect.Int64:
				fv.SetInt(int64(r.IntN(5)) - 2)
			case reflect.Uint64:
				fv.SetUint(uint64(r.IntN(1 << 40)))
			default:
				t.Fatalf("setSome: field %s.%s of type %s is not known here: give it a value", v.Type().Name(), f.Name, f.Type)
			}
		}
	}
}

func TestAssignmentsResponseAppendJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[string]bool{}
	check := func(resp *AssignmentsResponse) {
		t.Helper()
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.AppendJSON([]byte("x"))
		if !bytes.Equal(got[1:], want) {
			t.Fatalf("AppendJSON differs from json.Marshal:\n got %s\nwant %s", got[1:], want)
		}
		// The job's JSON given from elsewhere (the server's way), the
		// assignments' jobs zero: the same bytes.
		got = resp.AppendJSONEach([]byte("x"), len(resp.Assignments), func(b []byte, i int) []byte {
			a := resp.Assignments[i]
			job := a.Job.AppendJSON(nil)
			a.Job = spec.Job{}
			return a.AppendJSONWithJob(b, func(b []byte) []byte { return append(b, job...) })
		})
		if resp.Assignments != nil && !bytes.Equal(got[1:], want) {
			t.Fatalf("AppendJSONWithJob differs from json.Marshal:\n got %s\nwant %s", got[1:], want)
		}
	}
	check(&AssignmentsResponse{})
	check(&AssignmentsResponse{Assignments: []Assignment{}})
	for range 2000 {
		var resp AssignmentsResponse
		setSome(t, r, reflect.ValueOf(&resp).Elem(), seen)
		check(&resp)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[AssignmentsResponse](), reflect.TypeFor[Assignment]()} {
		for i := range typ.NumField() {
			if !seen[typ.Name()+"."+typ.Field(i).Name] {
				t.Errorf("%s.%s never set", typ.Name(), typ.Field(i).Name)
			}
		}
	}
}
