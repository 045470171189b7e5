package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time span written as a string in TOML: Go's syntax ("30s",
// "1h30m") plus a leading days term ("7d", "1d12h"). It stays a string so
// Validate can name the key of a bad value rather than stop at the first
// one; Std converts a validated value.
type Duration string

// Unlimited is the spelling of "no limit" accepted where a limit may be
// absent (Slurm's word). Std returns 0 for it.
const Unlimited = "UNLIMITED"

// Std returns d as a time.Duration; 0 for "", "0" and UNLIMITED, and 0 for
// a value Validate would reject.
func (d Duration) Std() time.Duration {
	v, _ := parseDuration(string(d))
	return v
}

// IsUnlimited reports whether d means "no limit" ("", "0" or UNLIMITED).
func (d Duration) IsUnlimited() bool { return d.Std() == 0 }

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || strings.EqualFold(s, Unlimited) {
		return 0, nil
	}
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16)
		if err != nil {
			return 0, fmt.Errorf("bad days %q", s[:i])
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fmt.Errorf("negative")
	}
	return days + v, nil
}

// checkDuration validates a duration value of key. A required duration
// must be positive; otherwise empty/0/UNLIMITED are accepted as "none".
func (p *problems) duration(key string, d Duration, required bool) {
	v, err := parseDuration(string(d))
	switch {
	case err != nil:
		p.addf("%s: %q is not a duration (use e.g. \"5s\", \"30m\", \"2h\" or \"7d\")", key, string(d))
	case required && v == 0:
		p.addf("%s: %q must be a positive duration (use e.g. \"5s\")", key, string(d))
	}
}
