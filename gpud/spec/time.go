package spec

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
)

// Time is a wall-clock instant that encodes as RFC 3339 in JSON and as null
// when unset, so "not started yet" reads as null rather than year 1.
type Time struct{ time.Time }

// NewTime wraps t, dropping the monotonic reading so values round-trip.
func NewTime(t time.Time) Time { return Time{t.Round(0)} }

// MarshalJSON implements json.Marshaler. Listings encode hundreds of
// thousands of these, so it appends straight into one buffer.
func (t Time) MarshalJSON() ([]byte, error) {
	return t.AppendJSON(make([]byte, 0, len(`"2006-01-02T15:04:05.999999999Z"`))), nil
}

// AppendJSON appends t's JSON encoding (as MarshalJSON) to b.
func (t Time) AppendJSON(b []byte) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// UnmarshalJSON implements json.Unmarshaler. The form MarshalJSON writes
// (UTC, "Z") is parsed by hand; anything else goes through time.Parse.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		if v, ok := parseUTC(b[1 : len(b)-1]); ok {
			t.Time = v
			return nil
		}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// parseUTC parses "YYYY-MM-DDTHH:MM:SS[.fraction]Z" exactly as
// time.Parse(time.RFC3339Nano, s) would; ok is false for any other form
// (offsets, escapes, out-of-range fields), which the caller hands to
// time.Parse so errors and edge cases stay the standard library's.
func parseUTC(s []byte) (v time.Time, ok bool) {
	if len(s) < len("2006-01-02T15:04:05Z") || s[len(s)-1] != 'Z' ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(p []byte) (int, bool) {
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(s[0:4])
	month, ok2 := num(s[5:7])
	day, ok3 := num(s[8:10])
	hour, ok4 := num(s[11:13])
	minute, ok5 := num(s[14:16])
	sec, ok6 := num(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := s[19 : len(s)-1]; len(frac) > 0 {
		// time.Parse takes 1 to 9 digits after the dot.
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		n, ok := num(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(frac) {
			n *= 10
		}
		nsec = n
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// Duration is a time span that encodes as whole seconds in JSON: the unit
// sacct/squeue users script against, and exact for every limit gpud takes.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return d.AppendJSON(nil), nil
}

// AppendJSON appends d's JSON encoding (whole seconds) to b.
func (d Duration) AppendJSON(b []byte) []byte {
	return strconv.AppendInt(b, int64(time.Duration(d)/time.Second), 10)
}

// UnmarshalJSON implements json.Unmarshaler. A plain integer (what
// MarshalJSON writes) is parsed directly; anything else goes through
// encoding/json, which keeps its errors and its handling of null.
// A number of seconds outside ±MaxDurationSeconds is an error: it has no
// time.Duration (2^63-1 seconds would wrap to a negative span).
func (d *Duration) UnmarshalJSON(b []byte) error {
	secs, ok := parseInt(b)
	if !ok {
		if err := json.Unmarshal(b, &secs); err != nil {
			return err
		}
	}
	if secs > MaxDurationSeconds || secs < -MaxDurationSeconds {
		// An UnmarshalTypeError gets the field's name from encoding/json.
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("%d seconds (out of range: a duration is at most %d seconds, about 292 years)", secs, MaxDurationSeconds),
			Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(time.Duration(secs) * time.Second)
	return nil
}

// MaxDurationSeconds is the largest whole number of seconds a Duration
// holds.
const MaxDurationSeconds = int64(math.MaxInt64 / time.Second)

// parseInt parses an optionally negative run of at most 18 decimal digits
// (so it cannot overflow), no leading zeros; ok is false otherwise.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
