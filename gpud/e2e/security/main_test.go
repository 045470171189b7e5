package security

import (
	"os"
	"testing"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestMain runs the tests, or, when a test runs this binary as another
// user, what that user does (its environment variable names it).
func TestMain(m *testing.M) {
	os.Exit(e2etest.Main(m, map[string]func(string) int{
		craftEnv:     craftRequests,
		plantEnv:     plantSymlinks,
		floodEnv:     floodConns,
		hostileEnv:   postHostile,
		badTokenEnv:  badTokenFlood,
		stepFloodEnv: stepFlood,
	}))
}
