package main

import (
	"os"
	"strings"
	"testing"
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
	for _, cmd := range newApp().Commands {
		if !strings.Contains(text, "gpud "+cmd.Name) {
			t.Errorf("man/gpud.8.md does not document the command %q", cmd.Name)
		}
		for _, f := range cmd.Flags {
			for _, name := range f.Names() {
				if len(name) > 1 && !strings.Contains(text, "--"+name) {
					t.Errorf("man/gpud.8.md does not document gpud %s --%s", cmd.Name, name)
				}
			}
		}
	}
}
