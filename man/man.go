package man

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/gpud/gpud/cli/directive"
	gpuqapp "github.com/gpud/gpud/gpuq/app"
	"github.com/gpud/gpud/gpusubmit/app"
	"github.com/urfave/cli/v2"
)

//go:embed gpud.8.md
var gpud8 string

//go:embed gpud.toml.5.md
var gpudToml5 string

// CompatDoc is docs/slurm-compat.md, relative to the repository root: the
// source of gpud-slurm(7), kept in one place for the web and for man.
const CompatDoc = "docs/slurm-compat.md"

// Pages maps each generated file name to its Markdown source; compat is the
// text of CompatDoc.
func Pages(compat string) map[string]string {
	return map[string]string{
		"gpud-slurm.7": slurmPage(compat),
		"gpusubmit.1":  cliPage(app.New(), 1, gpusubmitPlaceholder, gpusubmitExtra),
		"gpuq.1":       cliPage(gpuqapp.New(), 1, nil, gpuqExtra),
		"gpud.8":       gpud8,
		"gpud.toml.5":  gpudToml5,
	}
}

// Generate writes every page, as roff, into dir; root is the repository
// root (CompatDoc is read from it).
func Generate(dir, root string) error {
	compat, err := os.ReadFile(filepath.Join(root, CompatDoc))
	if err != nil {
		return fmt.Errorf("read the source of gpud-slurm(7): %w", err)
	}
	for name, md := range Pages(string(compat)) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, md2man.Render([]byte(md)), 0o644); err != nil {
			return fmt.Errorf("write man page %s: %w", path, err)
		}
	}
	return nil
}

// slurmPage makes gpud-slurm(7) of docs/slurm-compat.md: its title becomes
// the NAME section, each "## command" a section of its own, and each table
// row a definition (a table as wide as its widest row does not fit a
// terminal): the first cell is the term, the rest its text, the mark first.
func slurmPage(compat string) string {
	var b strings.Builder
	b.WriteString("% GPUD-SLURM 7 \"\" \"gpud\" \"gpud Manual\"\n\n# NAME\n\n")
	b.WriteString("gpud-slurm - Slurm's command names in gpud: each flag, field and state honoured, warned or refused\n\n")
	b.WriteString("# DESCRIPTION\n\n")
	inTable := false
	for _, l := range strings.Split(compat, "\n") {
		switch {
		case strings.HasPrefix(l, "# "):
			continue // the document's title: NAME above
		case strings.HasPrefix(l, "## "):
			l = "# " + strings.ToUpper(strings.TrimPrefix(l, "## "))
		case strings.HasPrefix(l, "|"):
			if !inTable { // the header row
				inTable = true
				continue
			}
			cells := TableCells(l)
			if len(cells) == 0 || strings.Trim(strings.Join(cells, ""), "-: ") == "" {
				continue // the separator row
			}
			var def []string
			for i, c := range cells[1:] {
				if c == "" {
					continue
				}
				if i == 0 && len(cells) > 2 {
					c = "*" + c + "*" // the mark
				}
				def = append(def, c)
			}
			fmt.Fprintf(&b, "%s\n: %s\n\n", cells[0], strings.Join(def, " — "))
			continue
		}
		inTable = false
		b.WriteString(l + "\n")
	}
	b.WriteString("\n# SEE ALSO\n\n**gpusubmit**(1), **gpuq**(1), **gpud**(8), **gpud.toml**(5)\n")
	return b.String()
}

// TableCells splits a Markdown table row into its cells, trimmed, at the
// pipes that are not escaped (\|), and unescapes the others.
func TableCells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	if strings.HasSuffix(row, "|") && !strings.HasSuffix(row, `\|`) {
		row = row[:len(row)-1]
	}
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

func gpusubmitPlaceholder(name string) string {
	if d, ok := directive.Lookup(name); ok {
		return d.Value
	}
	return ""
}

// cliPage renders a cli.App as a man page in Markdown.
func cliPage(a *cli.App, section int, placeholder func(string) string, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%% %s %d \"\" \"gpud\" \"gpud Manual\"\n\n", strings.ToUpper(a.Name), section)
	fmt.Fprintf(&b, "# NAME\n\n%s - %s\n\n# SYNOPSIS\n\n", a.Name, a.Usage)
	for _, l := range strings.Split(a.UsageText, "\n") {
		fmt.Fprintf(&b, "%s\n\n", escape(l))
	}
	fmt.Fprintf(&b, "# DESCRIPTION\n\n%s\n\n# OPTIONS\n\n", escape(a.Description))
	writeFlags(&b, a.Flags, placeholder)
	if len(a.Commands) > 0 {
		b.WriteString("# COMMANDS\n\n")
		for _, c := range a.Commands {
			if c.Hidden {
				continue
			}
			fmt.Fprintf(&b, "## %s %s\n\n%s\n\n", c.Name, escape(c.ArgsUsage), escape(c.Usage))
			if c.Description != "" {
				fmt.Fprintf(&b, "%s\n\n", escape(c.Description))
			}
			writeFlags(&b, c.Flags, placeholder)
		}
	}
	b.WriteString(extra)
	return b.String()
}

func writeFlags(b *strings.Builder, flags []cli.Flag, placeholder func(string) string) {
	for _, f := range flags {
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue
		}
		names := f.Names()
		df, _ := f.(cli.DocGenerationFlag)
		value := ""
		if df != nil && df.TakesValue() {
			value = "VALUE"
			if placeholder != nil && placeholder(names[0]) != "" {
				value = placeholder(names[0])
			}
		}
		var terms []string
		for _, n := range names {
			dash := "--"
			if len(n) == 1 {
				dash = "-"
			}
			t := "**" + dash + n + "**"
			if value != "" {
				t += " *" + escape(value) + "*"
			}
			terms = append(terms, t)
		}
		usage := ""
		if df != nil {
			usage = df.GetUsage()
			if v := df.GetDefaultText(); v != "" && df.TakesValue() {
				usage += " (default: " + v + ")"
			}
			if env := df.GetEnvVars(); len(env) > 0 {
				usage += " [environment: " + strings.Join(env, ", ") + "]"
			}
		}
		fmt.Fprintf(b, "%s\n: %s\n\n", strings.Join(terms, ", "), escape(usage))
	}
}

// escape keeps Markdown from reading option text as markup.
func escape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `_`, `\_`, "`", "\\`", `[`, `\[`, `]`, `\]`, `<`, `\<`, `>`, `\>`)
	return r.Replace(s)
}

const commonEnv = `# ENVIRONMENT

GPUD\_CONTROLLER
: controller address when **--controller** is not given: *unix:///path/gpud.sock* or *https://host:port*, or a comma-separated list of the controllers of an HA group (*https://c1:6817,https://c2:6817,https://c3:6817*): the client sends to the leader, follows a not-leader answer to another listed address, and rides out a failover for up to 12 seconds; a submission that may have reached a leader that then failed is reported, not sent twice.

`

const exitStatus = `# EXIT STATUS

0
: success.

1
: runtime or connection error: the controller is unreachable or failed.

2
: usage error or invalid request: an unknown option, a bad value, an option gpud cannot honour, a bad job id.

3
: refused by policy: permission denied, an account or QOS limit, a closed partition.

`

const gpusubmitExtra = commonEnv + `# JOB ENVIRONMENT

The job starts with the environment chosen by **--export**, plus GPUD\_JOB\_ID, GPUD\_ARRAY\_TASK\_ID,
GPUD\_NODELIST, GPUD\_NODEID, GPUD\_NNODES, GPUD\_GPUS, GPUD\_CHECKPOINT\_DIR, GPUD\_RESTART\_DIR, MASTER\_ADDR,
MASTER\_PORT, WORLD\_SIZE, NODE\_RANK and the Slurm equivalents SLURM\_JOB\_ID, SLURM\_ARRAY\_TASK\_ID,
SLURM\_JOB\_NODELIST, SLURM\_NODEID, SLURM\_NNODES, SLURM\_SUBMIT\_DIR and SLURM\_JOB\_NAME. See **gpud**(8).

# FILES

/run/gpud/gpud.sock
: default controller socket.

gpud-%j.out
: default output file in the working directory (gpud-%A\_%a.out for arrays).

` + `# EXIT STATUS

With **--wait**, gpusubmit exits with the job's status: 0 if it COMPLETED, otherwise its exit code, or 1 when
that is 0; for an array, the largest. Otherwise:

0
: the job was submitted (or, with **--test-only**, would be accepted).

1
: runtime or connection error: the controller is unreachable or failed.

2
: usage error or invalid request: an unknown option, a bad value, an option gpud cannot honour (named with its source, such as "line 7 of job.sh"), a script that is not text.

3
: refused by policy: permission denied, an account or QOS limit, a closed partition.

# EXAMPLES

    #!/bin/bash
    #SBATCH --job-name=train --partition=h100
    #SBATCH --gres=gpu:h100:8 --ntasks-per-node=8 --cpus-per-task=8 --mem-per-cpu=4G
    #SBATCH --time=1-00:00:00 --output=slurm-%j.out --checkpoint=30
    torchrun --nnodes=$GPUD_NNODES --node_rank=$NODE_RANK train.py

    gpusubmit -N 2 job.sh
    gpusubmit --gpus=1g.10gb:1 --time=30 --wrap 'python notebook.py'
    gpusubmit --parsable --wait job.sh

# SEE ALSO

**gpuq**(1), **gpud-slurm**(7), **gpud**(8), **gpud.toml**(5)
`

const gpuqExtra = commonEnv + `# FILES

/run/gpud/gpud.sock
: default controller socket.

` + exitStatus + `**gpuq cancel**, **hold**, **release** and **requeue** act on every job given and exit 0 only if all succeeded.

# EXAMPLES

    gpuq -u alice -t all
    gpuq --format '%.8i %.10T %.12b %R'
    gpuq show 42 --json
    gpuq cancel --signal USR1 42
    gpuq drain gpu07 --reason 'XID 79 on GPU 3'
    gpuq acct -S now-7days -s F,TO -o jobid,jobname,state,exitcode,gpu_hours
    gpuq acct -j 42 --json

# SEE ALSO

**gpusubmit**(1), **gpud-slurm**(7), **gpud**(8), **gpud.toml**(5)
`
