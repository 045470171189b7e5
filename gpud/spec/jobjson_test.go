package spec

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// fill sets v (recursively, every exported field) to random values, each
// field left zero about a third of the time, so that every omitempty and
// omitzero branch and every nil/empty slice is taken across runs. A field
// added to Job later is filled too: if AppendJSON does not write it, the
// comparison below fails.
func fill(r *rand.Rand, v reflect.Value, depth int) {
	if v.Type() == reflect.TypeFor[Time]() {
		switch r.IntN(3) {
		case 0:
		case 1:
			v.Set(reflect.ValueOf(NewTime(time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC())))
		default:
			v.Set(reflect.ValueOf(NewTime(time.Unix(r.Int64N(4e9), 0).UTC())))
		}
		return
	}
	if r.IntN(3) == 0 {
		return // zero
	}
	switch v.Kind() {
	case reflect.String:
		strs := []string{"", "a", "gpu-node-17", "h100", "<&>", "é ü", "tab\there", `quo"te`, `back\slash`, "\x01ctl", "\u2028", "日本"}
		v.SetString(strs[r.IntN(len(strs))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		vals := []int64{0, 1, -1, 7, 1 << 40, -(1 << 50), 3_600_000_000_000, 1_500_000_000}
		x := vals[r.IntN(len(vals))]
		if v.OverflowInt(x) {
			x = 5
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		vals := []uint64{0, 1, 42, 1 << 31, 1 << 62}
		x := vals[r.IntN(len(vals))]
		if v.OverflowUint(x) {
			x = 9
		}
		v.SetUint(x)
	case reflect.Float32, reflect.Float64:
		vals := []float64{0, 0.5, 0.25, 1e-7, 1e22, 0.333333333333, -0.0}
		v.SetFloat(vals[r.IntN(len(vals))])
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(r, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 4 {
			return
		}
		n := r.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if depth > 4 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range r.IntN(3) {
			k := reflect.New(v.Type().Key()).Elem()
			fill(r, k, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			fill(r, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i), depth+1)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			fill(r, v.Index(i), depth+1)
		}
	case reflect.Interface:
		// None in Job today; a future one is left nil.
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func TestJobAppendJSONMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(j *Job) {
		t.Helper()
		want, err := json.Marshal(j)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		got := j.AppendJSON([]byte("prefix"))
		if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("AppendJSON differs from json.Marshal:\n got %s\nwant %s", got[len("prefix"):], want)
		}
		if j.Alloc != nil {
			want, _ := json.Marshal(j.Alloc)
			if got := j.Alloc.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("Alloc.AppendJSON differs from json.Marshal:\n got %s\nwant %s", got, want)
			}
		}
	}
	check(&Job{})
	for range 20000 {
		var j Job
		fill(r, reflect.ValueOf(&j).Elem(), 0)
		check(&j)
	}
	// Every field set at once (fill leaves some zero).
	for range 200 {
		var j Job
		for range 8 {
			fill(r, reflect.ValueOf(&j).Elem(), 0)
			if reflect.ValueOf(j).IsZero() {
				continue
			}
		}
		check(&j)
	}
}

// TestFillReachesEveryJobField makes sure the comparison above is not
// vacuous: across its draws every field of Job (and of the structs it
// holds) is set to a non-zero value at least once.
func TestFillReachesEveryJobField(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(prefix, v.Elem())
			}
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[Time]() {
				return
			}
			for i := range v.NumField() {
				f := v.Type().Field(i)
				if !f.IsExported() {
					continue
				}
				name := prefix + "." + f.Name
				if !v.Field(i).IsZero() {
					seen[name] = true
				} else if _, ok := seen[name]; !ok {
					seen[name] = false
				}
				walk(name, v.Field(i))
			}
		}
	}
	for range 20000 {
		var j Job
		fill(r, reflect.ValueOf(&j).Elem(), 0)
		walk("Job", reflect.ValueOf(j))
	}
	for name, ok := range seen {
		if !ok {
			t.Errorf("%s was never filled", name)
		}
	}
	if len(seen) < 100 {
		t.Errorf("only %d fields seen; the walk is broken", len(seen))
	}
}

func BenchmarkJobJSON(b *testing.B) {
	j := Job{ID: 123456, JobSpec: JobSpec{Name: "train", Partition: "gpu", QOS: "normal", Account: "ml",
		Resources: Resources{Nodes: 1, CPUsPerNode: 4, MemMiB: 16384, GPUsPerNode: 1},
		TimeLimit: Duration(time.Hour), WorkDir: "/home/u", SubmitDir: "/home/u", Requeue: true},
		User: "alice", UID: 1000, GID: 1000, State: StateRunning, Priority: 4242,
		SubmitTime: NewTime(time.Unix(1.7e9, 123)), StartTime: NewTime(time.Unix(1.7e9+5, 0)),
		Attempt: 1, Nodes: []string{"node0042"}, GPUs: []string{"GPU-0"},
		Alloc: &Alloc{ID: "a-123456-1", JobID: 123456, Attempt: 1, Nodes: []NodeAlloc{{Node: "node0042", CPUs: 4, MemMiB: 16384, GPUs: []string{"GPU-0"}}},
			StartTime: NewTime(time.Unix(1.7e9+5, 0))}}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = j.AppendJSON(buf[:0])
		}
	})
}
