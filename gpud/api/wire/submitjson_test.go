package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestSubmitRequestJSON: SubmitRequest.MarshalJSON writes what
// encoding/json writes from the struct tags, byte for byte: for the zero
// request, for one with every field set (each found by reflection, so a
// field the encoder misses shows), with each field alone, and with
// strings encoding/json escapes. It fails when spec's types gain a field
// submitFields does not list: MarshalJSON then falls back to reflection.
func TestSubmitRequestJSON(t *testing.T) {
	if !submitFieldsKnown() {
		t.Fatal("SubmitRequest, JobSpec, Resources or Tasks has fields submitFields does not list: add them there and to MarshalJSON")
	}
	type plain SubmitRequest
	check := func(name string, r SubmitRequest) {
		t.Helper()
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := json.Marshal(plain(r))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	check("zero", SubmitRequest{})
	var full SubmitRequest
	n := 0
	fill(reflect.ValueOf(&full).Elem(), &n)
	check("every field", full)
	// Each field alone, so an omitempty misplaced on one shows.
	each(reflect.TypeFor[SubmitRequest](), nil, func(path []int) {
		var r SubmitRequest
		n := 0
		fill(reflect.ValueOf(&r).Elem().FieldByIndex(path), &n)
		check(reflect.TypeFor[SubmitRequest]().String()+fieldPath(path), r)
	})
	check("escapes", SubmitRequest{Job: spec.JobSpec{Name: "<a&b> \"q\" \\ \n\t\b\f\x01 \u2028\u2029 \xff é",
		Env: []string{"X=<script>", ""}, Resources: spec.Resources{GPUFraction: 1e-7}}})
}

// fill sets every field under v to a value that is not its zero, distinct
// by n.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Interface().(type) {
	case spec.Time:
		v.Set(reflect.ValueOf(spec.NewTime(time.Date(2026, 1, 2, 3, 4, 5, *n, time.UTC))))
		return
	case spec.Duration:
		v.Set(reflect.ValueOf(spec.Duration(time.Duration(*n) * time.Minute)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) / 8)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), n)
		fill(s.Index(1), n)
		v.Set(s)
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

// each calls f with the index path of every leaf field under t (structs
// other than spec.Time are walked into).
func each(t reflect.Type, path []int, f func([]int)) {
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		p := append(append([]int(nil), path...), i)
		if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[spec.Time]() {
			each(sf.Type, p, f)
			continue
		}
		f(p)
	}
}

func fieldPath(path []int) string {
	s, t := "", reflect.TypeFor[SubmitRequest]()
	for _, i := range path {
		s += "." + t.Field(i).Name
		t = t.Field(i).Type
	}
	return s
}

// TestSubmitRequestJSONRoundTrip: what MarshalJSON writes decodes back to
// the request (but the key, which travels as a header).
func TestSubmitRequestJSONRoundTrip(t *testing.T) {
	var r SubmitRequest
	n := 0
	fill(reflect.ValueOf(&r).Elem(), &n)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back SubmitRequest
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	r.IdempotencyKey = ""
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, r)
	}
}
