package steps

import (
	"os"
	"testing"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

func TestMain(m *testing.M) { os.Exit(e2etest.Main(m, nil)) }
