package controller

import (
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// parseArray expands an --array spec (spec.ParseArray).
func parseArray(s string) ([]int, int, error) { return spec.ParseArray(s) }

// arrayLimit returns the %MAX of a task's array spec, 0 when none.
func arrayLimit(j *spec.Job) int {
	if j.ArrayJobID == 0 {
		return 0
	}
	_, lim, ok := strings.Cut(j.Array, "%")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(lim)
	return n
}
