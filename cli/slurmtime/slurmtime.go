// Package slurmtime reads instants the way Slurm's commands take them: one
// grammar for sbatch --begin (and #SBATCH --begin), sacct and sreport
// -S/-E, and gpuq acct, report and audit --starttime/--endtime. It is the
// union of what Slurm 22.05's sacct(1) and sbatch(1) document and what gpud
// accepted before the grammars were merged (short unit names in now-N).
package slurmtime

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Forms lists the accepted forms, for usage lines and error messages.
const Forms = "now[{+|-}N[seconds|minutes|hours|days|weeks]] (e.g. now-2days, now+30min), " +
	"YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY][-HH:MM[:SS]], MM.DD[.YY], MMDD[YY], HH:MM[:SS][AM|PM], " +
	"today, tomorrow, midnight, noon, elevenses (11 AM), fika (3 PM), teatime (4 PM), or uts<seconds since 1970>; " +
	"a date and a time of day may be combined (today 16:00, tomorrow noon)"

// Summary names the common forms, for flag usage lines; errors list Forms.
const Summary = "now[{+|-}N[unit]], YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY][-HH:MM[:SS]], HH:MM[:SS][AM|PM], " +
	"today, tomorrow, midnight, noon, teatime (Slurm's forms, local time)"

// Direction settles what a form leaves open: the day of a bare time of day
// and the year of a date without one.
type Direction int

const (
	// Past reads a window's edge (sacct, sreport, gpuq acct): a bare time
	// of day is today's, a date without a year the latest one not after
	// today.
	Past Direction = iota
	// Future reads when to start (--begin): a time of day that has passed
	// is tomorrow's (so midnight is the coming one), a date without a year
	// that has passed is next year's.
	Future
)

// maxSpan bounds now±N (100 years): more is a typo, and it keeps the
// arithmetic far from overflow.
const maxSpan = 100 * 365 * 24 * time.Hour

// units are now±N's units: Slurm's words, and the short forms gpud took
// before (s, min, h, d, w, ...). A bare count is seconds, as in Slurm.
var units = []struct {
	names []string
	d     time.Duration
}{
	{[]string{"", "s", "sec", "secs", "second", "seconds"}, time.Second},
	{[]string{"m", "min", "mins", "minute", "minutes"}, time.Minute},
	{[]string{"h", "hour", "hours"}, time.Hour},
	{[]string{"d", "day", "days"}, 24 * time.Hour},
	{[]string{"w", "week", "weeks"}, 7 * 24 * time.Hour},
}

// clockWords are the named times of day.
var clockWords = map[string]int{"midnight": 0, "elevenses": 11, "noon": 12, "fika": 15, "teatime": 16}

// Parse reads s as an instant in now's location. The forms are Forms; dir
// says which way a form that names no day or no year points.
func Parse(s string, now time.Time, dir Direction) (time.Time, error) {
	t, why := parse(strings.ToLower(strings.TrimSpace(s)), now, dir)
	if why != "" {
		return time.Time{}, fmt.Errorf("%q is not a time (%s); use %s", s, why, Forms)
	}
	return t, nil
}

// instant collects what the words of a time name; -1 is not named.
type instant struct {
	year, month, day  int
	hour, min, sec    int
	dateSet, clockSet bool
}

func parse(s string, now time.Time, dir Direction) (time.Time, string) {
	if s == "" {
		return time.Time{}, "empty"
	}
	if rest, ok := strings.CutPrefix(s, "now"); ok {
		return relative(rest, now)
	}
	if rest, ok := strings.CutPrefix(s, "uts"); ok {
		n, err := spec.ParseDigits(rest)
		if err != nil || n < 1000000 {
			return time.Time{}, "uts takes the seconds since 1970, at least 1000000"
		}
		return time.Unix(n, 0).In(now.Location()), ""
	}
	in := instant{year: -1}
	for i := 0; i < len(s); {
		c := s[i]
		// Blanks, '-' and 'T' join a date to a time of day (2025-04-01T08:30,
		// 04/01-08:30, today 16:00).
		if c == ' ' || c == '\t' || c == '-' || c == 't' && i+1 < len(s) && isDigit(s[i+1]) {
			i++
			continue
		}
		if word := leadingWord(s[i:]); word != "" {
			if why := in.word(word, now); why != "" {
				return time.Time{}, why
			}
			i += len(word)
			continue
		}
		if !isDigit(c) {
			return time.Time{}, fmt.Sprintf("unexpected %q", s[i:])
		}
		var n int
		var why string
		if i+1 < len(s) && s[i+1] == ':' || i+2 < len(s) && s[i+2] == ':' {
			n, why = in.clock(s[i:])
		} else {
			n, why = in.date(s[i:])
		}
		if why != "" {
			return time.Time{}, why
		}
		i += n
	}
	return in.resolve(now, dir)
}

// relative reads what follows "now": nothing, or {+|-}N[unit] with blanks
// allowed around N (now + 1 hour, as Slurm takes it).
func relative(rest string, now time.Time) (time.Time, string) {
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return now, ""
	}
	sign := time.Duration(1)
	switch rest[0] {
	case '-':
		sign = -1
	case '+':
	default:
		return time.Time{}, "now takes +N or -N with a unit"
	}
	rest = strings.TrimSpace(rest[1:])
	i := 0
	for i < len(rest) && isDigit(rest[i]) {
		i++
	}
	n, err := spec.ParseDigits(rest[:i])
	if err != nil {
		return time.Time{}, "now+ and now- take a whole number"
	}
	unit := strings.TrimSpace(rest[i:])
	for _, u := range units {
		for _, name := range u.names {
			if unit != name {
				continue
			}
			if n > int64(maxSpan/u.d) {
				return time.Time{}, "more than 100 years away"
			}
			return now.Add(sign * time.Duration(n) * u.d), ""
		}
	}
	return time.Time{}, fmt.Sprintf("%q is not a unit of seconds, minutes, hours, days or weeks", unit)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// leadingWord returns the letters at the start of s.
func leadingWord(s string) string {
	i := 0
	for i < len(s) && s[i] >= 'a' && s[i] <= 'z' {
		i++
	}
	return s[:i]
}

// word takes a named day or time of day.
func (in *instant) word(w string, now time.Time) string {
	switch w {
	case "today", "tomorrow":
		day := now
		if w == "tomorrow" {
			day = now.AddDate(0, 0, 1)
		}
		return in.setDate(day.Year(), int(day.Month()), day.Day())
	}
	if h, ok := clockWords[w]; ok {
		return in.setClock(h, 0, 0)
	}
	return fmt.Sprintf("%q is not a time word", w)
}

func (in *instant) setDate(y, m, d int) string {
	if in.dateSet {
		return "it names two dates"
	}
	in.dateSet, in.year, in.month, in.day = true, y, m, d
	return ""
}

func (in *instant) setClock(h, m, s int) string {
	if in.clockSet {
		return "it names two times of day"
	}
	in.clockSet, in.hour, in.min, in.sec = true, h, m, s
	return ""
}

// digits reads exactly n digits at the start of s; ok is false when s has
// fewer.
func digits(s string, n int) (v int, ok bool) {
	if len(s) < n {
		return 0, false
	}
	for i := range n {
		if !isDigit(s[i]) {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	return v, true
}

// upTo2 reads one or two digits at the start of s and how many it read.
func upTo2(s string) (v, n int) {
	for n < 2 && n < len(s) && isDigit(s[n]) {
		v = v*10 + int(s[n]-'0')
		n++
	}
	return v, n
}

// clock reads H[H]:MM[:SS][ ][AM|PM] at the start of s and returns how
// many bytes it took.
func (in *instant) clock(s string) (int, string) {
	const form = "a time of day is HH:MM[:SS] with an optional AM or PM"
	h, i := upTo2(s)
	if i == 0 || i >= len(s) || s[i] != ':' {
		return 0, form
	}
	m, ok := digits(s[i+1:], 2)
	if !ok {
		return 0, form
	}
	i += 3
	sec := 0
	if i < len(s) && s[i] == ':' {
		if sec, ok = digits(s[i+1:], 2); !ok {
			return 0, form
		}
		i += 3
	}
	j := i
	for j < len(s) && s[j] == ' ' {
		j++
	}
	switch leadingWord(s[j:]) {
	case "am":
		if h < 1 || h > 12 {
			return 0, "AM and PM take hours 1-12"
		}
		h, i = h%12, j+2
	case "pm":
		if h < 1 || h > 12 {
			return 0, "AM and PM take hours 1-12"
		}
		h, i = h%12+12, j+2
	}
	if h > 23 || m > 59 || sec > 59 {
		return 0, "hours are 0-23, minutes and seconds 0-59"
	}
	return i, in.setClock(h, m, sec)
}

// date reads YYYY-MM-DD, or MM/DD[/YY], MM.DD[.YY] or MMDD[YY] (two-digit
// years are 20YY), at the start of s and returns how many bytes it took.
func (in *instant) date(s string) (int, string) {
	if len(s) >= 8 && s[4] == '-' && s[7] == '-' {
		y, ok1 := digits(s, 4)
		m, ok2 := digits(s[5:], 2)
		d, n := upTo2(s[8:])
		if !ok1 || !ok2 || n == 0 {
			return 0, "a date is YYYY-MM-DD"
		}
		return 8 + n, in.checkedDate(y, m, d)
	}
	m, i := upTo2(s)
	if i < len(s) && (s[i] == '/' || s[i] == '.') {
		i++
	}
	d, n := upTo2(s[i:])
	if n == 0 {
		return 0, "a date is YYYY-MM-DD, MM/DD[/YY], MM.DD[.YY] or MMDD[YY]"
	}
	i += n
	y := -1
	if i < len(s) && (s[i] == '/' || s[i] == '.') {
		i++
		yy, ok := digits(s[i:], 2)
		if !ok {
			return 0, "the year after MM/DD is two digits (MM/DD/YY)"
		}
		y, i = 2000+yy, i+2
	} else if yy, ok := digits(s[i:], 2); ok {
		y, i = 2000+yy, i+2
	}
	if i < len(s) && isDigit(s[i]) {
		return 0, "a date is YYYY-MM-DD, MM/DD[/YY], MM.DD[.YY] or MMDD[YY]"
	}
	return i, in.checkedDate(y, m, d)
}

// checkedDate sets a date whose month and day exist (Feb 30 does not);
// y is -1 when the form names no year.
func (in *instant) checkedDate(y, m, d int) string {
	if m < 1 || m > 12 {
		return "months are 1-12"
	}
	if y < 0 {
		// No year: Feb 29 exists in some year (resolve finds it).
		if d < 1 || d > daysIn(2024, m) {
			return fmt.Sprintf("%s has no day %d", time.Month(m), d)
		}
	} else if d < 1 || d > daysIn(y, m) {
		return fmt.Sprintf("%d has no %s %d", y, time.Month(m), d)
	}
	return in.setDate(y, m, d)
}

func daysIn(y, m int) int {
	return time.Date(y, time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// resolve fills what the words left open, as dir says.
func (in *instant) resolve(now time.Time, dir Direction) (time.Time, string) {
	loc := now.Location()
	if !in.dateSet && !in.clockSet {
		return time.Time{}, "no date or time of day"
	}
	if !in.dateSet {
		at := time.Date(now.Year(), now.Month(), now.Day(), in.hour, in.min, in.sec, 0, loc)
		if dir == Future && at.Before(now) {
			at = time.Date(now.Year(), now.Month(), now.Day()+1, in.hour, in.min, in.sec, 0, loc)
		}
		return at, ""
	}
	at := func(y int) time.Time {
		return time.Date(y, time.Month(in.month), in.day, in.hour, in.min, in.sec, 0, loc)
	}
	if in.year >= 0 {
		return at(in.year), ""
	}
	// No year: the nearest such date in dir's direction that exists (Feb
	// 29 waits for a leap year). Past compares days, so a window may start
	// later today; Future compares instants, like a bare time of day.
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	step := 1
	if dir == Past {
		step = -1
	}
	for y := now.Year(); y != now.Year()+8*step; y += step {
		t := at(y)
		if t.Day() != in.day {
			continue
		}
		day := time.Date(y, time.Month(in.month), in.day, 0, 0, 0, 0, loc)
		if dir == Past && !day.After(today) || dir == Future && !t.Before(now) {
			return t, ""
		}
	}
	return time.Time{}, "no such date"
}
