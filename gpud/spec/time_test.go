package spec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// The fast paths must agree with what encoding/json and time.Parse did
// before them, for every input, valid or not.

func oldTimeMarshal(t Time) []byte {
	if t.IsZero() {
		return []byte("null")
	}
	b, _ := json.Marshal(t.UTC().Format(time.RFC3339Nano))
	return b
}

func oldTimeUnmarshal(b []byte) (time.Time, error) {
	if string(b) == "null" {
		return time.Time{}, nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, s)
}

// sameTime reports whether a and b are the same instant in the same zone:
// == for UTC (the fast path must build exactly what time.Parse builds),
// else equal instants with equal zone names and offsets (time.Parse makes
// a fresh *Location per offset, so pointers never match).
func sameTime(a, b time.Time) bool {
	if a.Location() == time.UTC || b.Location() == time.UTC {
		return a == b
	}
	an, ao := a.Zone()
	bn, bo := b.Zone()
	return a.Equal(b) && an == bn && ao == bo
}

func TestTimeJSON(t *testing.T) {
	t.Parallel()
	berlin := time.FixedZone("CET", 3600)
	tests := []struct {
		name string
		in   Time
		want string
	}{
		{"zero", Time{}, "null"},
		{"utc seconds", NewTime(time.Date(2026, 11, 30, 6, 31, 13, 0, time.UTC)), `"2026-11-30T06:31:13Z"`},
		{"nanos", NewTime(time.Date(2026, 1, 2, 3, 4, 5, 984412569, time.UTC)), `"2026-01-02T03:04:05.984412569Z"`},
		{"trailing zeros trimmed", NewTime(time.Date(2026, 1, 2, 3, 4, 5, 500000000, time.UTC)), `"2026-01-02T03:04:05.5Z"`},
		{"zone becomes utc", NewTime(time.Date(2026, 1, 2, 0, 30, 0, 0, berlin)), `"2026-01-01T23:30:00Z"`},
		{"leap day", NewTime(time.Date(2024, 2, 29, 23, 59, 59, 1, time.UTC)), `"2024-02-29T23:59:59.000000001Z"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.in)
			if err != nil || string(got) != tc.want {
				t.Fatalf("Marshal = %s, %v; want %s", got, err, tc.want)
			}
			if old := oldTimeMarshal(tc.in); string(old) != tc.want {
				t.Fatalf("old encoding %s differs from %s", old, tc.want)
			}
			var back Time
			if err := json.Unmarshal(got, &back); err != nil || !back.Equal(tc.in.Time) || back.Time != tc.in.UTC() && !tc.in.IsZero() {
				t.Fatalf("round trip of %s = %v, %v; want %v", got, back, err, tc.in)
			}
		})
	}
}

func TestTimeUnmarshalMatchesTimeParse(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`null`, `"2026-11-30T06:31:13Z"`, `"2026-11-30T06:31:13.1Z"`, `"2026-11-30T06:31:13.123456789Z"`,
		`"2026-11-30T06:31:13.1234567891Z"`, `"2026-11-30T06:31:13.Z"`, `"2026-11-30T06:31:13,5Z"`,
		`"2026-11-30T06:31:13+01:00"`, `"2026-11-30T06:31:13z"`, `"2026-02-29T00:00:00Z"`, `"2024-02-29T00:00:00Z"`,
		`"1900-02-29T00:00:00Z"`, `"2000-02-29T00:00:00Z"`, `"2026-13-01T00:00:00Z"`, `"2026-00-01T00:00:00Z"`,
		`"2026-04-31T00:00:00Z"`, `"2026-01-01T24:00:00Z"`, `"2026-01-01T23:60:00Z"`, `"2026-01-01T23:59:60Z"`,
		`"0000-01-01T00:00:00Z"`, `"9999-12-31T23:59:59.999999999Z"`, `"2026-1-01T00:00:00Z"`, `"+026-01-01T00:00:00Z"`,
		`"2026-01-01T00:00:00\u005a"`, `"2026-01-01 00:00:00Z"`, `""`, `"x"`, `12`, `"2026-01-01T00:00:00.-1Z"`,
	} {
		want, wantErr := oldTimeUnmarshal([]byte(in))
		var got Time
		err := got.UnmarshalJSON([]byte(in))
		if (err != nil) != (wantErr != nil) || !sameTime(got.Time, want) {
			t.Errorf("UnmarshalJSON(%s) = %v, %v; time.Parse gives %v, %v", in, got.Time, err, want, wantErr)
		}
	}
}

func FuzzTimeUnmarshal(f *testing.F) {
	for _, s := range []string{`"2026-11-30T06:31:13.984412569Z"`, `"2024-02-29T23:59:59Z"`, `null`, `"2026-11-30T06:31:13+01:00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, wantErr := oldTimeUnmarshal(in)
		var got Time
		err := got.UnmarshalJSON(in)
		if (err != nil) != (wantErr != nil) || !sameTime(got.Time, want) {
			t.Fatalf("UnmarshalJSON(%q) = %v, %v; time.Parse gives %v, %v", in, got.Time, err, want, wantErr)
		}
		if err == nil {
			enc := got.AppendJSON(nil)
			if old := oldTimeMarshal(got); string(enc) != string(old) {
				t.Fatalf("AppendJSON = %s, json.Marshal of the string gives %s", enc, old)
			}
		}
	})
}

func FuzzTimeRoundTrip(f *testing.F) {
	f.Add(int64(1796020273), int64(984412569))
	f.Add(int64(0), int64(0))
	f.Add(int64(-62135596800), int64(1))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		in := NewTime(time.Unix(sec%(400*365*86400)+1_700_000_000, nsec%1e9))
		b, err := json.Marshal(in)
		if err != nil || string(b) != string(oldTimeMarshal(in)) {
			t.Fatalf("Marshal(%v) = %s, %v; want %s", in, b, err, oldTimeMarshal(in))
		}
		var back Time
		if err := json.Unmarshal(b, &back); err != nil || back.Time != in.UTC() {
			t.Fatalf("round trip %s = %v, %v; want %v", b, back.Time, err, in.UTC())
		}
	})
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`0`, `3600`, `-5`, `null`, `007`, `1e3`, `1.5`, `"3"`, `922337203685`, `9223372036854775807`,
		`99999999999999999999`, `-`, ``, `-0`, `123456789012345678`, `1234567890123456789`,
		`9223372036`, `9223372037`, `-9223372037`, `18000000000`} {
		var old int64
		oldErr := json.Unmarshal([]byte(in), &old)
		want := Duration(time.Duration(old) * time.Second)
		// Seconds with no time.Duration are refused, not wrapped (a
		// time limit of 2^63-1 seconds once became -1s).
		if old > MaxDurationSeconds || old < -MaxDurationSeconds {
			oldErr = fmt.Errorf("out of range")
		}
		var got Duration
		err := got.UnmarshalJSON([]byte(in))
		if (err != nil) != (oldErr != nil) || (err == nil && got != want) {
			t.Errorf("UnmarshalJSON(%s) = %v, %v; want %v, %v", in, got, err, want, oldErr)
		}
	}
	for _, d := range []time.Duration{0, time.Second, 90 * time.Minute, 1500 * time.Millisecond, -time.Hour} {
		b, err := json.Marshal(Duration(d))
		if want := strconv.FormatInt(int64(d/time.Second), 10); err != nil || string(b) != want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", d, b, err, want)
		}
	}
}
