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
	if err := Generate(dir, ".."); err != nil {
		t.Fatal(err)
	}
	for name := range Pages(compatDoc(t)) {
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
	if err := Generate(dir, ".."); err != nil {
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
	for name := range Pages(compatDoc(t)) {
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

// compatDoc reads docs/slurm-compat.md, the source of gpud-slurm(7).
func compatDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", CompatDoc))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCompatTables: every Slurm name the build links (the Makefile's
// SBATCH_NAMES and GPUQ_NAMES) has its section in docs/slurm-compat.md with
// a table, and every row of every table has its header's number of cells (a
// bare | inside a code span splits a row on GitHub and in gpud-slurm(7);
// write \|).
func TestCompatTables(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(string(mk), "\n") {
		for _, v := range []string{"SBATCH_NAMES := ", "GPUQ_NAMES := "} {
			if rest, ok := strings.CutPrefix(l, v); ok {
				names = append(names, strings.Fields(rest)...)
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found %d Slurm names in the Makefile (%v); want SBATCH_NAMES and GPUQ_NAMES", len(names), names)
	}
	doc := compatDoc(t)
	rows := map[string]int{} // table rows (not header or separator) per section
	section, header := "", 0
	for i, l := range strings.Split(doc, "\n") {
		if s, ok := strings.CutPrefix(l, "## "); ok {
			section = strings.Fields(s)[0]
			continue
		}
		if !strings.HasPrefix(l, "|") {
			header = 0
			continue
		}
		n := len(TableCells(l))
		switch {
		case header == 0:
			header = n
		case n != header:
			t.Errorf("docs/slurm-compat.md:%d: %d cells, the table's header has %d (escape | as \\|): %.80s", i+1, n, header, l)
		case !strings.HasPrefix(l, "|---") && !strings.HasPrefix(l, "| ---"):
			rows[section]++
		}
	}
	for _, n := range names {
		if rows[n] == 0 {
			t.Errorf("docs/slurm-compat.md has no \"## %s\" section with a table of its flags", n)
		}
	}
}

// TestSlurmPage: each row of docs/slurm-compat.md's tables is a definition
// in gpud-slurm(7), with its mark.
func TestSlurmPage(t *testing.T) {
	page := slurmPage("# T\n\n## squeue\n\n| Flag | Mark | Notes |\n|---|---|---|\n| `-t a\\|b` | honoured | as Slurm |\n| States | | `PD R` |\n\ntext\n")
	for _, want := range []string{"# SQUEUE\n", "`-t a|b`\n: *honoured* — as Slurm\n", "States\n: `PD R`\n", "text\n", "# SEE ALSO"} {
		if !strings.Contains(page, want) {
			t.Errorf("gpud-slurm(7) lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "Flag") || strings.Contains(page, "---") {
		t.Errorf("gpud-slurm(7) kept a table's header or separator:\n%s", page)
	}
}
