package config

import (
	"fmt"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// parseMemMiB reads a node's memory size like "512G", "512GiB", "64000M"
// or "1T" (spec.ParseMemSize, the parser the CLIs share) and returns MiB.
// "" means "detect" and gives 0. Kilobytes are refused: no node's memory
// is that small, so K is a typo for M or G.
func parseMemMiB(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if strings.ContainsAny(s, "kK") {
		return 0, fmt.Errorf("unit K is too small for a node's memory; use M, G or T")
	}
	n, err := spec.ParseMemSize(s)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("not a positive size")
	}
	return n, nil
}
