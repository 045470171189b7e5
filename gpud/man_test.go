package main

import (
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestManPageCoversFlags fails when a gpud flag or command is missing from
// man/gpud.8.md (the source of man/gpud.8).
func TestManPageCoversFlags(t *testing.T) {
	page, err := os.ReadFile("../man/gpud.8.md")
	if err != nil {
		t.Fatal(err)
	}
	// go-md2man source escapes '-' nowhere but '_' as '\_'.
	text := strings.ReplaceAll(string(page), `\_`, "_")
	_, synopsis, _ := strings.Cut(text, "# SYNOPSIS")
	synopsis, _, _ = strings.Cut(synopsis, "# DESCRIPTION")
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			name := prefix + " " + cmd.Name
			if !strings.Contains(text, name) {
				t.Errorf("man/gpud.8.md does not document the command %q", name)
			}
			if len(cmd.Subcommands) == 0 && !cmd.Hidden && !strings.Contains(synopsis, "**"+name+"**") {
				t.Errorf("man/gpud.8.md's SYNOPSIS lacks **%s**", name)
			}
			for _, f := range cmd.Flags {
				for _, flag := range f.Names() {
					if len(flag) > 1 && !strings.Contains(text, "--"+flag) {
						t.Errorf("man/gpud.8.md does not document %s --%s", name, flag)
					}
				}
			}
			walk(name, cmd.Subcommands)
		}
	}
	walk("gpud", newApp().Commands)
}
