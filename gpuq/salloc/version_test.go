package salloc

import (
	"bytes"
	"testing"

	"github.com/gpud/gpud/gpud/api"
)

// TestVersion: salloc --version and -V print the Slurm release gpud
// follows, as Slurm's salloc does; they were refused as unknown options.
func TestVersion(t *testing.T) {
	for _, flag := range []string{"--version", "-V"} {
		var out, errb bytes.Buffer
		if code := Main([]string{"salloc", flag}, &out, &errb); code != 0 || out.String() != api.SlurmVersion+"\n" {
			t.Errorf("salloc %s: exit %d %q %q; want %q", flag, code, out.String(), errb.String(), api.SlurmVersion)
		}
	}
}
