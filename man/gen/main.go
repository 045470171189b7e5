// Command gen writes gpud's man pages (see package man). Run it from the
// repository root: go run ./man/gen [-out DIR].
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpud/gpud/man"
)

func main() {
	out := flag.String("out", "man", "directory to write the pages into")
	root := flag.String("root", ".", "repository root, where "+man.CompatDoc+" is read")
	flag.Parse()
	if err := man.Generate(*out, *root); err != nil {
		fmt.Fprintf(os.Stderr, "man/gen: %v; run it from the repository root or pass -out\n", err)
		os.Exit(1)
	}
}
