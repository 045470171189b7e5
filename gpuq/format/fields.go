package format

import (
	"strconv"
	"strings"
)

// Field is one %[.][size]X field of an squeue- or sinfo-style --format,
// with the literal text before it; Verb is 0 for trailing text alone.
type Field struct {
	Lit   string
	Verb  byte
	Width int
	Right bool
}

// FieldError says where a %[.][size]X format went wrong, so each command
// words it its own way.
type FieldError struct {
	// Index is the 1-based number of the field that failed.
	Index int
	// Digits is the width as written, when it has more than 4 digits.
	Digits string
	// End is true when the format ends inside the field.
	End bool
	// Letter is the unknown field letter, when neither of the above.
	Letter byte
}

func (e *FieldError) Error() string {
	switch {
	case e.Digits != "":
		return "field " + strconv.Itoa(e.Index) + ": width " + e.Digits + " has more than 4 digits"
	case e.End:
		return "the format ends inside field " + strconv.Itoa(e.Index)
	}
	return "field " + strconv.Itoa(e.Index) + ": unknown letter " + string(e.Letter)
}

// maxWidthDigits bounds a field's width, so a format cannot make a
// command write gigabytes of padding.
const maxWidthDigits = 4

// ParseFields splits s into its %[.][size]X fields and literal text (%%
// is a percent sign), accepting the letters known says are fields.
func ParseFields(s string, known func(byte) bool) ([]Field, *FieldError) {
	var out []Field
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			lit.WriteByte(s[i])
			continue
		}
		i++
		if i < len(s) && s[i] == '%' {
			lit.WriteByte('%')
			continue
		}
		f := Field{}
		if i < len(s) && s[i] == '.' {
			f.Right = true
			i++
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i-start > maxWidthDigits {
			return nil, &FieldError{Index: len(out) + 1, Digits: s[start:i]}
		}
		f.Width, _ = strconv.Atoi(s[start:i])
		if i >= len(s) {
			return nil, &FieldError{Index: len(out) + 1, End: true}
		}
		if !known(s[i]) {
			return nil, &FieldError{Index: len(out) + 1, Letter: s[i]}
		}
		f.Verb = s[i]
		f.Lit = lit.String()
		lit.Reset()
		out = append(out, f)
	}
	if lit.Len() > 0 {
		out = append(out, Field{Lit: lit.String()})
	}
	return out, nil
}
