package spec

import (
	"slices"
	"strconv"
	"strings"
)

// MaxArrayTasks caps the tasks one --array submission may create.
const MaxArrayTasks = 10000

// MaxArrayIndex is the largest task index (Slurm's MaxArraySize limit).
const MaxArrayIndex = 4000000

// arrayForms describes the --array syntax for error messages.
const arrayForms = "use N-M, N-M:STEP, comma lists of those, and an optional %MAX (e.g. 0-99:2%10)"

// ParseArray expands an --array spec ("0-99%10", "1,3,5", "0-15:4") into
// its task indices, ascending and without duplicates, and the %MAX limit
// on running tasks (0: none).
func ParseArray(s string) ([]int, int, error) {
	body, lim, hasLim := strings.Cut(s, "%")
	limit := 0
	if hasLim {
		n, err := strconv.Atoi(lim)
		if err != nil || n < 1 {
			return nil, 0, Errorf(ErrInvalid, "--array=%s: %%MAX must be a whole number of at least 1; %s", s, arrayForms)
		}
		limit = n
	}
	if body == "" {
		return nil, 0, Errorf(ErrInvalid, "--array=%s names no tasks; %s", s, arrayForms)
	}
	var idx []int
	for r := range strings.SplitSeq(body, ",") {
		span, stepS, hasStep := strings.Cut(r, ":")
		loS, hiS, isRange := strings.Cut(span, "-")
		lo, err1 := strconv.Atoi(loS)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.Atoi(hiS)
		}
		step, err3 := 1, error(nil)
		if hasStep {
			step, err3 = strconv.Atoi(stepS)
		}
		if err1 != nil || err2 != nil || err3 != nil || lo < 0 || hi < lo || step < 1 || hasStep && !isRange {
			return nil, 0, Errorf(ErrInvalid, "--array=%s: %q is not N, N-M or N-M:STEP with 0 <= N <= M and STEP >= 1; %s", s, r, arrayForms)
		}
		if hi > MaxArrayIndex || step > MaxArrayIndex {
			// Bounded so i += step below cannot wrap around.
			return nil, 0, Errorf(ErrInvalid, "--array=%s: %q goes past %d, the largest task index (and step); number tasks from 0", s, r, MaxArrayIndex)
		}
		for i := lo; i <= hi; i += step {
			if len(idx) >= MaxArrayTasks {
				return nil, 0, Errorf(ErrInvalid, "--array=%s makes more than %d tasks, the limit per array; split it into several arrays", s, MaxArrayTasks)
			}
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	return idx, limit, nil
}
