package step

import (
	"fmt"
	"math/rand/v2"
	"strings"
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

// TestMergeEnvScanMatchesMaps: MergeEnv scans a short base and uses maps
// for a long one; both give what merging by maps gives, for random
// environments around mergeScanMax with repeated and spoofed keys.
func TestMergeEnvScanMatchesMaps(t *testing.T) {
	t.Parallel()
	byMaps := func(base, over []string) []string {
		key := func(kv string) string { k, _, _ := strings.Cut(kv, "="); return k }
		owned := map[string]bool{}
		for _, kv := range over {
			owned[key(kv)] = true
		}
		out := make([]string, 0, len(base)+len(over))
		dup := map[string]int{}
		for _, kv := range base {
			k := key(kv)
			if owned[k] {
				continue
			}
			if i, ok := dup[k]; ok {
				out[i] = kv
				continue
			}
			dup[k] = len(out)
			out = append(out, kv)
		}
		return append(out, over...)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	vars := func(n int) []string {
		env := make([]string, n)
		for i := range env {
			env[i] = fmt.Sprintf("K%d=%d", rng.IntN(12), rng.IntN(100))
			if rng.IntN(8) == 0 {
				env[i] = fmt.Sprintf("K%d", rng.IntN(12)) // no "="
			}
		}
		return env
	}
	for i := range 2000 {
		base, over := vars(rng.IntN(2*mergeScanMax+2)), vars(rng.IntN(10))
		if diff := cmp.Diff(byMaps(base, over), MergeEnv(base, over)); diff != "" {
			t.Fatalf("case %d: MergeEnv(%q, %q) (-maps +got):\n%s", i, base, over, diff)
		}
	}
}
