package config

import (
	"fmt"
	"strconv"
	"strings"
)

// parseMemMiB reads a memory size like "512G", "512GiB", "64000M" or
// "1T" (binary units; a bare number is MiB, as in Slurm) and returns MiB.
// "" means "detect" and gives 0. It stays private: the CLIs parse Slurm's
// --mem themselves.
func parseMemMiB(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "IB"), "B")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("not a positive size")
	}
	var mul int64
	switch unit {
	case "", "M":
		mul = 1
	case "G":
		mul = 1 << 10
	case "T":
		mul = 1 << 20
	default:
		return 0, fmt.Errorf("unknown unit %q", s[len(num):])
	}
	if n > (1<<62)/mul {
		return 0, fmt.Errorf("too large")
	}
	return n * mul, nil
}
