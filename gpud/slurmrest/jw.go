package slurmrest

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// jw writes JSON straight into a byte slice. Answers are written field
// by field from the tables in fields.go, in the order Slurm's documents
// list them; a job list of 10,000 jobs is one pass with no reflection.
//
// comma says whether the next key or value needs a comma before it.
type jw struct {
	b     []byte
	comma bool
	v     int // the data_parser version being written
}

func (w *jw) sep() {
	if w.comma {
		w.b = append(w.b, ',')
	}
	w.comma = true
}

// key starts a member of the current object.
func (w *jw) key(k string) {
	w.sep()
	w.b = appendString(w.b, k)
	w.b = append(w.b, ':')
	w.comma = false
}

func (w *jw) begin(c byte) {
	w.sep()
	w.b = append(w.b, c)
	w.comma = false
}

func (w *jw) end(c byte) {
	w.b = append(w.b, c)
	w.comma = true
}

// obj writes an object whose members fn writes.
func (w *jw) obj(fn func()) {
	w.begin('{')
	fn()
	w.end('}')
}

// arr writes an array whose elements fn writes.
func (w *jw) arr(fn func()) {
	w.begin('[')
	fn()
	w.end(']')
}

func (w *jw) str(s string) {
	w.sep()
	w.b = appendString(w.b, s)
}

func (w *jw) int(n int64) {
	w.sep()
	w.b = strconv.AppendInt(w.b, n, 10)
}

func (w *jw) uint(n uint64) {
	w.sep()
	w.b = strconv.AppendUint(w.b, n, 10)
}

func (w *jw) bool(v bool) {
	w.sep()
	w.b = strconv.AppendBool(w.b, v)
}

func (w *jw) float(f float64) {
	w.sep()
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	w.b = strconv.AppendFloat(w.b, f, 'g', -1, 64)
}

func (w *jw) raw(b []byte) {
	w.sep()
	w.b = append(w.b, b...)
}

func (w *jw) strs(ss []string) {
	w.arr(func() {
		for _, s := range ss {
			w.str(s)
		}
	})
}

// Slurm's "no value" wrappers ({set, infinite, number}): a number that
// may be unset or infinite.

// num writes a set, finite number.
func (w *jw) num(n int64) { w.noVal(true, false, n) }

// unset writes a number that has no value.
func (w *jw) unset() { w.noVal(false, false, 0) }

// infinite writes an infinite (unlimited) number.
func (w *jw) infinite() { w.noVal(true, true, 0) }

func (w *jw) noVal(set, inf bool, n int64) {
	w.obj(func() {
		w.key("set")
		w.bool(set)
		w.key("infinite")
		w.bool(inf)
		w.key("number")
		w.int(n)
	})
}

// numIf writes n when ok, else an unset number.
func (w *jw) numIf(ok bool, n int64) {
	if ok {
		w.num(n)
	} else {
		w.unset()
	}
}

// fnum writes a set float64_no_val_struct.
func (w *jw) fnum(f float64) {
	w.obj(func() {
		w.key("set")
		w.bool(true)
		w.key("infinite")
		w.bool(false)
		w.key("number")
		w.float(f)
	})
}

// when writes a time as Slurm does, Unix seconds; the zero time is unset.
func (w *jw) when(t time.Time) {
	if t.IsZero() {
		w.unset()
		return
	}
	w.num(t.Unix())
}

// appendString appends s as a JSON string: invalid UTF-8 becomes U+FFFD
// and control characters are escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
