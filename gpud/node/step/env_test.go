package step

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	got := MergeEnv([]string{"A=1", "GPUD_JOB_ID=spoof", "B=2", "A=3", "EMPTY"}, []string{"GPUD_JOB_ID=9", "C=4"})
	want := []string{"A=3", "B=2", "EMPTY", "GPUD_JOB_ID=9", "C=4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MergeEnv (-want +got):\n%s", diff)
	}
}
