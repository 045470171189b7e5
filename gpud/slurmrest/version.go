package slurmrest

import (
	"slices"
	"strconv"
	"strings"
)

// Versions are the data_parser versions served, oldest first. Each is
// the minor number of "v0.0.N". Adding one means adding its number here
// and, in the field and route tables, the rows whose since or until it
// changes.
var Versions = []int{42, 43, 44, 45}

// Deprecated versions still answer, with a warning in every response
// (Slurm 26.05 deprecates v0.0.42).
var Deprecated = []int{42}

// latest is the newest version served.
func latest() int { return Versions[len(Versions)-1] }

// versionName is the URL form of data_parser version v ("v0.0.45").
func versionName(v int) string { return "v0.0." + strconv.Itoa(v) }

// parseVersion reads "v0.0.45"; ok is false for a version not served.
func parseVersion(s string) (v int, ok bool) {
	rest, found := strings.CutPrefix(s, "v0.0.")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || !slices.Contains(Versions, n) {
		return 0, false
	}
	return n, true
}

// span is the range of versions a field or route exists in: from since
// (0: the first served) through until (0: still in the latest).
type span struct{ since, until int }

func (s span) has(v int) bool {
	return (s.since == 0 || v >= s.since) && (s.until == 0 || v <= s.until)
}
