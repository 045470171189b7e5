package man

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gpuqapp "github.com/gpud/gpud/gpuq/app"
	"github.com/gpud/gpud/gpusubmit/app"
	"github.com/urfave/cli/v2"
)

// TestCheckedInPagesAreCurrent regenerates every page and compares it with
// the committed file.
func TestCheckedInPagesAreCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir); err != nil {
		t.Fatal(err)
	}
	for name := range Pages() {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%s is not checked in: %v; run go run ./man/gen", name, err)
		}
		if string(got) != string(want) {
			t.Errorf("man/%s is stale; run go run ./man/gen and commit the result", name)
		}
	}
}

// plain strips roff escapes so flag names can be searched for.
func plain(roff string) string {
	return strings.NewReplacer(`\-`, "-", `\fB`, "", `\fI`, "", `\fP`, "", `\fR`, "", `\&`, "").Replace(roff)
}

// TestEveryFlagIsDocumented walks each CLI's flags and subcommands.
func TestEveryFlagIsDocumented(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir); err != nil {
		t.Fatal(err)
	}
	for page, a := range map[string]*cli.App{"gpusubmit.1": app.New(), "gpuq.1": gpuqapp.New()} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		text := plain(string(b))
		check := func(where string, flags []cli.Flag) {
			for _, f := range flags {
				if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
					continue // internal (gpusubmit's hand-off of command-line problems)
				}
				for _, n := range f.Names() {
					dash := "--"
					if len(n) == 1 {
						dash = "-"
					}
					if !strings.Contains(text, dash+n) {
						t.Errorf("%s: %s flag %s%s is not documented", page, where, dash, n)
					}
				}
				if df, ok := f.(cli.DocGenerationFlag); ok && !strings.Contains(text, strings.Fields(df.GetUsage())[0]) {
					t.Errorf("%s: %s flag %s has no description", page, where, f.Names()[0])
				}
			}
		}
		check("global", a.Flags)
		for _, c := range a.Commands {
			if !strings.Contains(text, c.Name) {
				t.Errorf("%s: command %s is not documented", page, c.Name)
			}
			check(c.Name, c.Flags)
		}
		for _, section := range []string{"ENVIRONMENT", "FILES", "EXIT STATUS"} {
			if !strings.Contains(text, ".SH "+section) {
				t.Errorf("%s lacks the %s section", page, section)
			}
		}
	}
}

// TestPagesRender runs man(1) on each page when it is installed.
func TestPagesRender(t *testing.T) {
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("man is not installed (apt-get install man-db); skipping the render check")
	}
	for name := range Pages() {
		cmd := exec.Command("man", "--warnings", "-l", name)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		// Headings come out overstruck (N\bNA\bA...) when not on a terminal.
		text := strings.NewReplacer("\b", "").Replace(stdout.String())
		if err != nil || stderr.Len() > 0 || !strings.Contains(text, "SEE") {
			t.Errorf("man --warnings -l %s: %v\nstderr: %s\nstdout: %.300s", name, err, stderr.String(), text)
		}
	}
}
