package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoginProfile: etc/profile.d/gpud.sh (make install puts it in
// /etc/profile.d) puts a job's gpud tools, named by GPUD_TOOLS_DIR, first
// on the PATH a login shell reset, once; outside a job it appends the
// installed bin directory when PATH lacks it. In dash and bash, as
// /etc/profile sources it.
func TestLoginProfile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "etc", "profile.d", "gpud.sh"))
	if err != nil {
		t.Fatal(err)
	}
	tools, bindir := t.TempDir(), t.TempDir()
	profile := filepath.Join(t.TempDir(), "gpud.sh")
	// As make install writes it.
	if err := os.WriteFile(profile, []byte(strings.ReplaceAll(string(src), "@BINDIR@", bindir)), 0o644); err != nil {
		t.Fatal(err)
	}
	login := "/usr/local/bin:/usr/bin:/bin" // Debian's /etc/profile, for a user
	for _, tc := range []struct {
		name, path, toolsEnv, want string
	}{
		{"in a job after the login reset", login, tools, tools + ":" + login},
		{"in a job, already first", tools + ":" + login, tools, tools + ":" + login},
		{"outside a job", login, "", login + ":" + bindir},
		{"outside a job, already on PATH", bindir + ":" + login, "", bindir + ":" + login},
		{"a tools dir that is not there", login, filepath.Join(tools, "gone"), login + ":" + bindir},
	} {
		for _, sh := range []string{"sh", "bash"} {
			path, err := exec.LookPath(sh)
			if err != nil {
				t.Fatalf("%s: %v", sh, err)
			}
			cmd := exec.Command(path, "-c", `. "$1"; printf %s "$PATH"`, sh, profile)
			cmd.Env = []string{"PATH=" + tc.path, "GPUD_TOOLS_DIR=" + tc.toolsEnv}
			out, err := cmd.Output()
			if err != nil || string(out) != tc.want {
				t.Errorf("%s, %s: PATH %q (%v), want %q", tc.name, sh, out, err, tc.want)
			}
		}
	}
}
