package server

import (
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
)

// TestCheckSealed: a heartbeat's sealed checkpoint list is bounded and
// names real job IDs; the error says what is wrong.
func TestCheckSealed(t *testing.T) {
	ok := make([]api.CkptDir, api.MaxSealed)
	for i := range ok {
		ok[i].Job = 1
	}
	if err := checkSealed(ok); err != nil {
		t.Errorf("%d entries: %v", len(ok), err)
	}
	if err := checkSealed(append(ok, api.CkptDir{Job: 2})); err == nil || !strings.Contains(err.Error(), "at most 256") {
		t.Errorf("%d entries: %v; want refused (at most 256)", len(ok)+1, err)
	}
	if err := checkSealed([]api.CkptDir{{Job: 0}}); err == nil || !strings.Contains(err.Error(), "job 0") {
		t.Errorf("job 0: %v; want refused", err)
	}
}
