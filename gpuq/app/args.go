package app

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// positionals returns the command's positional arguments and applies any of
// its flags that follow them. Go's flag parsing stops at the first
// positional, but the documented forms put flags last ("gpuq show 42
// --json", "gpuq drain gpu01 --reason R"), so they are picked up here. "--"
// ends flag parsing.
func positionals(c *cli.Context) ([]string, error) {
	var out []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			out = append(out, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := lookupFlag(c.Command, name)
		if f == nil {
			return nil, invalid("command line: flag provided but not defined: %s; see gpuq %s --help", a, c.Command.Name)
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return nil, invalid("command line: flag needs an argument: %s; see gpuq %s --help", a, c.Command.Name)
			}
			i++
			value = args[i]
		}
		if err := c.Set(f.Names()[0], value); err != nil {
			return nil, invalid("command line: %s: %v", a, err)
		}
	}
	return out, nil
}

func lookupFlag(cmd *cli.Command, name string) cli.Flag {
	if cmd == nil {
		return nil
	}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}
