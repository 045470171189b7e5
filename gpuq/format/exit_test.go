package format

import "testing"

// TestExitCode: a job killed by signal N reads 0:N as in Slurm (before,
// a cancelled job read 143:15); an exit code the job chose stays.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		code, sig int
		want      string
	}{
		{0, 0, "0:0"},
		{1, 0, "1:0"},
		{143, 15, "0:15"},
		{137, 9, "0:9"},
		{2, 15, "2:15"},
	} {
		if got := ExitCode(tc.code, tc.sig); got != tc.want {
			t.Errorf("ExitCode(%d, %d) = %q, want %q", tc.code, tc.sig, got, tc.want)
		}
	}
}
