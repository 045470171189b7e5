// Package man generates gpud's manual pages: gpusubmit.1 and gpuq.1 from
// the CLIs' cli.App (every flag and subcommand, plus hand-written
// ENVIRONMENT, FILES and EXIT STATUS sections), and gpud.8 and gpud.toml.5
// from the hand-written Markdown beside this file, all rendered to roff
// with go-md2man. `go run ./man/gen` rewrites the checked-in pages;
// man_test.go fails when they are stale.
//
// It imports the CLIs' app packages and go-md2man; nothing imports it.
package man
