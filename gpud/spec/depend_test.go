package spec_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// TestParseDependency: the one --dependency parser (Validate at submit,
// the controller when it schedules).
func TestParseDependency(t *testing.T) {
	good := map[string]spec.Dependency{
		"afterok:5":                 {Items: []spec.DepItem{{Kind: spec.DepAfterOK, Refs: []spec.DepRef{{ID: 5, Task: -1}}}}},
		"after:1:2_3,singleton":     {Items: []spec.DepItem{{Kind: spec.DepAfter, Refs: []spec.DepRef{{ID: 1, Task: -1}, {ID: 2, Task: 3}}}, {Kind: spec.DepSingleton}}},
		"afterany:7?afternotok:8_0": {Any: true, Items: []spec.DepItem{{Kind: spec.DepAfterAny, Refs: []spec.DepRef{{ID: 7, Task: -1}}}, {Kind: spec.DepAfterNotOK, Refs: []spec.DepRef{{ID: 8, Task: 0}}}}},
	}
	for s, want := range good {
		d, err := spec.ParseDependency(s)
		if err != nil || !reflect.DeepEqual(*d, want) {
			t.Errorf("ParseDependency(%q) = %+v, %v; want %+v", s, d, err, want)
		}
	}
	for s, msg := range map[string]string{
		"afterok:1,after?2": "mixes , (all) and ? (any)",
		"aftercorr:1":       "aftercorr is not supported",
		"afterok:1+5":       "delays (+MINUTES) are not supported",
		"afterok":           "afterok names no job",
		"afterok:0":         `"0" is not a job id`,
		"afterok:3_-1":      `"3_-1" is not a job id`,
		"singleton:4":       "singleton takes no job ids",
		"before:4":          `"before:4" is not a dependency`,
	} {
		_, err := spec.ParseDependency(s)
		if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseDependency(%q) = %v; want invalid, %q", s, err, msg)
		}
		js := spec.JobSpec{Script: "x", WorkDir: "/tmp", Depend: s}
		fes := spec.FieldErrors(js.Validate())
		if len(fes) != 1 || fes[0].Field != "--dependency" || fes[0].Msg != err.Error() {
			t.Errorf("Validate with --dependency=%s: %v; want the parser's message on --dependency", s, fes)
		}
	}
	if got := (spec.DepRef{ID: 4, Task: 2}).String() + " " + (spec.DepRef{ID: 9, Task: -1}).String(); got != "4_2 9" {
		t.Errorf("DepRef strings %q, want 4_2 9", got)
	}
}
