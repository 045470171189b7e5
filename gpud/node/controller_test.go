package node

import (
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime/fake"
)

// New refuses a missing controller client, whether the interface is nil
// or holds a nil *api.Client (which would otherwise fail only at the
// first call, inside a goroutine).
func TestNewNeedsControllerClient(t *testing.T) {
	cfg := Config{Name: "n1", StateDir: t.TempDir()}
	var nilClient *api.Client
	for name, c := range map[string]ControllerClient{"nil interface": nil, "nil *api.Client": nilClient} {
		if _, err := New(cfg, c, fake.New()); err == nil || !strings.Contains(err.Error(), "controller client") {
			t.Errorf("%s: New = %v; want an error naming the controller client", name, err)
		}
	}
}
