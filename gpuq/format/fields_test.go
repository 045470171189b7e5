package format

import (
	"reflect"
	"testing"
)

// ParseFields serves squeue's and sinfo's --format alike: literal text,
// %%, right-justification, widths of at most 4 digits, and an error that
// says which field went wrong and how.
func TestParseFields(t *testing.T) {
	known := func(c byte) bool { return c == 'i' || c == 'P' }
	fields, err := ParseFields("a%%b%.8i|%P x", known)
	if err != nil {
		t.Fatal(err)
	}
	want := []Field{{Lit: "a%b", Verb: 'i', Width: 8, Right: true}, {Lit: "|", Verb: 'P'}, {Lit: " x"}}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields = %+v, want %+v", fields, want)
	}
	for _, tc := range []struct {
		in   string
		want FieldError
	}{
		{"%i%12345P", FieldError{Index: 2, Digits: "12345"}},
		{"%i%.9", FieldError{Index: 2, End: true}},
		{"%q", FieldError{Index: 1, Letter: 'q'}},
	} {
		_, err := ParseFields(tc.in, known)
		if err == nil || *err != tc.want {
			t.Errorf("ParseFields(%q) error = %+v, want %+v", tc.in, err, tc.want)
		}
	}
}
