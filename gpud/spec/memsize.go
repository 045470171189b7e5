package spec

import (
	"errors"
	"strconv"
	"strings"
)

// MaxMemMiB is 1 PiB: a larger memory size is a typo. It also keeps every
// accepted size writable as plain MiB in at most 12 digits, so sizes
// round-trip.
const MaxMemMiB = 1 << 30

// ParseMemSize reads a memory size as Slurm and gpud's config files write
// it and returns MiB: a whole number with an optional unit K, M, G or T,
// which may be followed by B or iB in any case (500M, 4G, 8gb, 20GB,
// 512GiB, 954M). A bare number is MiB, as in Slurm; K rounds up to whole
// MiB. Units are binary (1G = 1024M), as Slurm's are. Zero is returned as
// 0: callers decide what it means. It is the one memory parser the CLIs
// and the config share.
func ParseMemSize(s string) (int64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToUpper(s[len(num):])
	if u, ok := strings.CutSuffix(unit, "IB"); ok && u != "" {
		unit = u
	} else if u, ok := strings.CutSuffix(unit, "B"); ok && u != "" {
		unit = u
	}
	mul, div := int64(1), int64(1)
	switch unit {
	case "", "M":
	case "K":
		div = 1024
	case "G":
		mul = 1024
	case "T":
		mul = 1024 * 1024
	default:
		return 0, errors.New("unknown unit " + strconv.Quote(s[len(num):]) + "; use K, M, G or T")
	}
	if num == "" || len(num) > 15 || strings.TrimLeft(num, "0123456789") != "" {
		return 0, errors.New("not a whole number")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, errors.New("not a whole number")
	}
	if n > MaxMemMiB*div/mul {
		return 0, errors.New("larger than 1 PiB")
	}
	return (n*mul + div - 1) / div, nil
}
