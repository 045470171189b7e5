package slurmtime

import (
	"strings"
	"testing"
	"time"
)

// now is a Friday afternoon in a zone that is not UTC, so a parse that
// used UTC or the machine's zone would show.
var (
	loc = time.FixedZone("X", 2*3600)
	now = time.Date(2025, 3, 14, 15, 9, 26, 0, loc)
)

func at(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, loc)
}

// TestParseBothWays: forms that name a day and a year mean the same
// whichever way they are read; the relative ones too.
func TestParseBothWays(t *testing.T) {
	t.Parallel()
	tests := map[string]time.Time{
		// now±N: Slurm's words, the short units gpud took before, seconds by
		// default, blanks as Slurm allows them, any case.
		"now":           now,
		"NOW":           now,
		"now-2days":     now.Add(-48 * time.Hour), // Snakemake's sacct query
		"now+1hour":     now.Add(time.Hour),
		"now+60":        now.Add(time.Minute),
		"now-30minutes": now.Add(-30 * time.Minute),
		"NOW+1WEEK":     now.Add(7 * 24 * time.Hour),
		"now-15min":     now.Add(-15 * time.Minute),
		"now-2h":        now.Add(-2 * time.Hour),
		"now+10s":       now.Add(10 * time.Second),
		"now + 1 hour":  now.Add(time.Hour),
		"  now-1d  ":    now.Add(-24 * time.Hour),
		// Dates with a year, alone and with a time of day.
		"2025-04-01":          at(2025, 4, 1, 0, 0, 0),
		"2025-04-01T08:30":    at(2025, 4, 1, 8, 30, 0),
		"2025-04-01t08:30:15": at(2025, 4, 1, 8, 30, 15),
		"2025-04-01 08:30":    at(2025, 4, 1, 8, 30, 0),
		"2024-02-29":          at(2024, 2, 29, 0, 0, 0),
		"01/02/06":            at(2006, 1, 2, 0, 0, 0),
		"01/02/06-10:20":      at(2006, 1, 2, 10, 20, 0),
		"01.02.06":            at(2006, 1, 2, 0, 0, 0),
		"010206":              at(2006, 1, 2, 0, 0, 0),
		"12/31/24-23:59:59":   at(2024, 12, 31, 23, 59, 59),
		"uts1700000000":       time.Unix(1700000000, 0).In(loc),
		// A named day and a named or written time of day, either order.
		"today":          at(2025, 3, 14, 0, 0, 0),
		"tomorrow":       at(2025, 3, 15, 0, 0, 0),
		"today 16:00":    at(2025, 3, 14, 16, 0, 0),
		"tomorrow noon":  at(2025, 3, 15, 12, 0, 0),
		"teatime today":  at(2025, 3, 14, 16, 0, 0),
		"today 9:05pm":   at(2025, 3, 14, 21, 5, 0),
		"today 12:30 AM": at(2025, 3, 14, 0, 30, 0),
		"today 12:30pm":  at(2025, 3, 14, 12, 30, 0),
	}
	for in, want := range tests {
		for _, dir := range []Direction{Past, Future} {
			got, err := Parse(in, now, dir)
			if err != nil || !got.Equal(want) {
				t.Errorf("Parse(%q, %v) = %v, %v; want %v", in, dir, got, err, want)
			}
		}
	}
}

// TestParseDirection: a bare time of day and a date without a year point
// back for a window's edge and forward for --begin.
func TestParseDirection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in           string
		past, future time.Time
	}{
		{"16:00", at(2025, 3, 14, 16, 0, 0), at(2025, 3, 14, 16, 0, 0)},
		{"16:00:30", at(2025, 3, 14, 16, 0, 30), at(2025, 3, 14, 16, 0, 30)},
		{"09:00", at(2025, 3, 14, 9, 0, 0), at(2025, 3, 15, 9, 0, 0)},
		{"8:00", at(2025, 3, 14, 8, 0, 0), at(2025, 3, 15, 8, 0, 0)},
		{"3:30pm", at(2025, 3, 14, 15, 30, 0), at(2025, 3, 14, 15, 30, 0)},
		{"midnight", at(2025, 3, 14, 0, 0, 0), at(2025, 3, 15, 0, 0, 0)},
		{"noon", at(2025, 3, 14, 12, 0, 0), at(2025, 3, 15, 12, 0, 0)},
		{"elevenses", at(2025, 3, 14, 11, 0, 0), at(2025, 3, 15, 11, 0, 0)},
		{"fika", at(2025, 3, 14, 15, 0, 0), at(2025, 3, 15, 15, 0, 0)},
		{"teatime", at(2025, 3, 14, 16, 0, 0), at(2025, 3, 14, 16, 0, 0)},
		{"03/14", at(2025, 3, 14, 0, 0, 0), at(2026, 3, 14, 0, 0, 0)},
		{"03/14-16:00", at(2025, 3, 14, 16, 0, 0), at(2025, 3, 14, 16, 0, 0)},
		{"12/25", at(2024, 12, 25, 0, 0, 0), at(2025, 12, 25, 0, 0, 0)},
		{"0101", at(2025, 1, 1, 0, 0, 0), at(2026, 1, 1, 0, 0, 0)},
		{"2.29", at(2024, 2, 29, 0, 0, 0), at(2028, 2, 29, 0, 0, 0)},
	}
	for _, tc := range tests {
		for dir, want := range map[Direction]time.Time{Past: tc.past, Future: tc.future} {
			got, err := Parse(tc.in, now, dir)
			if err != nil || !got.Equal(want) {
				t.Errorf("Parse(%q, %v) = %v, %v; want %v", tc.in, dir, got, err, want)
			}
		}
	}
}

// TestParseRefuses: each bad time is refused with what is wrong and the
// forms to use.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"":                    "empty",
		"   ":                 "empty",
		"soon":                `"soon" is not a time word`,
		"yesterday-ish":       "not a time word",
		"now-":                "whole number",
		"now+":                "whole number",
		"now-x":               "whole number",
		"now-1year":           `"year" is not a unit`,
		"now+1fortnight":      "not a unit",
		"now-2fortnights":     "not a unit",
		"now 16:00":           "+N or -N",
		"now+9999999999weeks": "100 years",
		"nowhere":             "+N or -N",
		"uts12":               "at least 1000000",
		"uts":                 "at least 1000000",
		"2025-13-01":          "months are 1-12",
		"2025-02-29":          "2025 has no February 29",
		"2025-04-31":          "2025 has no April 31",
		"02/30":               "February has no day 30",
		"13/01":               "months are 1-12",
		"25:00":               "hours are 0-23",
		"10:60":               "hours are 0-23, minutes and seconds 0-59",
		"10:5":                "HH:MM",
		"13:00pm":             "AM and PM take hours 1-12",
		"0:30am":              "AM and PM take hours 1-12",
		"01/02/2006":          "a date is",
		"today tomorrow":      "two dates",
		"noon 16:00":          "two times of day",
		"2025-01-02 x":        `"x" is not a time word`,
		"2025-01-02T":         `"t" is not a time word`,
		"16:00+1":             `unexpected "+1"`,
	}
	for in, want := range tests {
		_, err := Parse(in, now, Past)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error with %q", in, want)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "; use now[") {
			t.Errorf("Parse(%q): %v; want it to say %q and list the forms", in, err, want)
		}
	}
}

// TestParseAcrossDST: tomorrow's time of day is a wall-clock time, not 24
// hours on, when the clocks change overnight.
func TestParseAcrossDST(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	eve := time.Date(2025, 3, 29, 22, 0, 0, 0, berlin) // clocks go forward at 02:00
	got, err := Parse("09:00", eve, Future)
	if want := time.Date(2025, 3, 30, 9, 0, 0, 0, berlin); err != nil || !got.Equal(want) {
		t.Errorf("Parse(09:00) the evening before DST = %v, %v; want %v", got, err, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"now-2days", "2025-04-01T08:30", "01/02/06-10:20", "today 9:05pm", "uts1700000000", "12/25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, dir := range []Direction{Past, Future} {
			got, err := Parse(s, now, dir)
			if err != nil {
				continue
			}
			// Every accepted time is in now's zone and reads back the same
			// in the canonical form.
			if got.Location() != loc {
				t.Errorf("Parse(%q, %v) = %v, not in now's zone", s, dir, got)
			}
			if y := got.Year(); y < 1000 || y > 9999 {
				continue
			}
			canon := got.Format("2006-01-02T15:04:05")
			if back, err := Parse(canon, now, dir); err != nil || !back.Equal(got.Truncate(time.Second)) {
				t.Errorf("Parse(%q, %v) = %v, but its form %s reads as %v, %v", s, dir, got, canon, back, err)
			}
		}
	})
}
