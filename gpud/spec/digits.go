package spec

import (
	"errors"
	"strconv"
)

// ParseDigits reads a count as Slurm's options and host lists write it: a
// non-empty run of at most 12 ASCII digits, no sign, no spaces, no base
// prefix. Twelve digits keep the product of two of them inside an int64,
// so callers can scale a count by a unit or a width without overflow. It
// is the one digit reader the host lists and the directives share.
func ParseDigits(s string) (int64, error) {
	if s == "" || len(s) > 12 {
		return 0, errors.New("not a number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a number")
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
