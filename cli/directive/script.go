package directive

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/spec"
)

// Directive prefixes gpusubmit reads, in column 0 like sbatch.
var prefixes = []string{"#GPU", "#SBATCH"}

// Script is what ParseScript found in a batch script's header.
type Script struct {
	// Options are the directives in file order: those of the job, or of
	// its component 0 when it is a heterogeneous job.
	Options []Option
	// Het are the options of a heterogeneous job's further components,
	// each after a `#SBATCH hetjob` (or the older `packjob`) line.
	Het [][]Option
	// Warnings are problems worth a line on stderr that do not stop the
	// submission (directives after the first command, indented ones).
	Warnings []string
}

// ParseScript checks that text is a batch script and reads the #GPU and
// #SBATCH directives of its header: the lines after the #! line up to the
// first line that is neither blank nor a comment. name is used in
// messages ("line 7 of job.sh"). Every problem is returned, joined, each
// of kind spec.ErrInvalid.
func ParseScript(name string, text []byte) (Script, error) {
	var s Script
	if i := bytes.IndexByte(text, 0); i >= 0 {
		return s, spec.Errorf(spec.ErrInvalid, "%s contains a NUL byte at offset %d: it is not a text script; pass a shell script or use --wrap 'CMD'", name, i)
	}
	if !utf8.Valid(text) {
		line := 1 + bytes.Count(text[:firstInvalidUTF8(text)], []byte("\n"))
		return s, spec.Errorf(spec.ErrInvalid, "line %d of %s is not valid UTF-8: it is not a text script; convert it (iconv -t UTF-8) or use --wrap 'CMD'", line, name)
	}
	if bytes.Contains(text, []byte("\r\n")) {
		return s, spec.Errorf(spec.ErrInvalid, "%s has DOS line breaks (\\r\\n), which break its interpreter line; convert it with dos2unix", name)
	}
	if !bytes.HasPrefix(text, []byte("#!")) {
		return s, spec.Errorf(spec.ErrInvalid, "%s does not start with #! and an interpreter; add a first line such as #!/bin/bash, or use --wrap 'CMD'", name)
	}
	var errs []error
	header := true
	firstCmd := 0
	lines := strings.Split(string(text), "\n")
	for i, line := range lines[1:] {
		n := i + 2
		src := Source{File: name, Line: n}
		trimmed := strings.TrimLeft(line, " \t")
		if trimmed == "" {
			continue
		}
		rest, isDirective := cutPrefix(line)
		if !isDirective && trimmed != line {
			if _, indented := cutPrefix(trimmed); indented {
				s.Warnings = append(s.Warnings, fmt.Sprintf("%s: indented %s is a comment, not a directive; start it in column 1", src, strings.Fields(trimmed)[0]))
				continue
			}
		}
		if !header {
			if isDirective {
				s.Warnings = append(s.Warnings, fmt.Sprintf("%s: directive after the first command (line %d) is ignored, as sbatch does; move it above line %d", src, firstCmd, firstCmd))
			}
			continue
		}
		if !isDirective {
			if trimmed[0] != '#' {
				header, firstCmd = false, n
			}
			continue
		}
		if f := strings.Fields(rest); len(f) == 1 && (f[0] == "hetjob" || f[0] == "packjob") {
			s.Het = append(s.Het, []Option{}) // the next component's options follow
			continue
		}
		opts, err := parseDirective(src, rest)
		if err != nil {
			errs = append(errs, err)
		}
		if n := len(s.Het); n > 0 {
			s.Het[n-1] = append(s.Het[n-1], opts...)
		} else {
			s.Options = append(s.Options, opts...)
		}
	}
	return s, errors.Join(errs...)
}

// cutPrefix returns the text after a directive prefix at the start of
// line. The prefix must be followed by a blank or the end of the line, so
// "#GPUS" is a comment.
func cutPrefix(line string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(line, p); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return rest, true
		}
	}
	return "", false
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// parseDirective reads the options of one directive line as sbatch does,
// with getopt_long: unique prefixes, bundled short options, "--opt value".
// Every problem on the line is reported.
func parseDirective(src Source, text string) ([]Option, error) {
	toks, err := tokenize(text)
	if err != nil {
		return nil, spec.Errorf(spec.ErrInvalid, "%s: %v", src, err)
	}
	set := OptionSet()
	set.Mode = getopt.Permute
	ps, rest, perrs := set.Parse(toks)
	var errs []error
	for _, e := range perrs {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: %s", src, UsageMessage(e)))
	}
	for _, w := range rest {
		if w == "hetjob" || w == "packjob" || w == ":" {
			errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: %q separates the components of a heterogeneous job on a line of its own (#SBATCH hetjob); put the options before it and after it on other lines", src, w))
			continue
		}
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: %q is not an option; directives hold options only (#SBATCH --time=10)", src, w))
	}
	opts, problems := resolve(ps, src)
	for _, p := range problems {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: %s", src, p))
	}
	return opts, errors.Join(errs...)
}

// ParseCommandLine reads sbatch's options at the front of args as
// getopt_long does (salloc's command line): it stops at the first word that
// is not an option, which with every word after it is returned as the
// command. Every problem is reported at once, one a line; the options that
// were good come back beside them, so a caller can add its own problems.
func ParseCommandLine(args []string) ([]Option, []string, error) {
	ps, rest, perrs := OptionSet().Parse(args)
	var problems []string
	for _, e := range perrs {
		problems = append(problems, UsageMessage(e))
	}
	opts, more := resolve(ps, CommandLine)
	if problems = append(problems, more...); len(problems) > 0 {
		return opts, rest, spec.Errorf(spec.ErrInvalid, "%s", strings.Join(problems, "\n"))
	}
	return opts, rest, nil
}

// resolve turns what getopt parsed into Options from src: each name to its
// Def, a switch's value read, a missing optional value filled in. The
// problems are the options that are not a job's: unknown ones, a command's
// own (--controller, --help, --usage, --version) and, in a script, those
// only a command line takes.
func resolve(ps []getopt.Parsed, src Source) ([]Option, []string) {
	var (
		opts     []Option
		problems []string
	)
	for _, p := range ps {
		name := p.Name()
		def, ok := Lookup(name)
		switch {
		case name == "controller" || name == "help" || name == "usage" || name == "version":
			if src == CommandLine {
				problems = append(problems, fmt.Sprintf("--%s is not a job option; give it alone", name))
			} else {
				problems = append(problems, fmt.Sprintf("--%s can only be given on the command line", name))
			}
			continue
		case !ok:
			problems = append(problems, unknownOption(name).Error())
			continue
		case def.CommandLineOnly && src != CommandLine:
			problems = append(problems, fmt.Sprintf("--%s can only be given on the command line", def.Name))
			continue
		}
		value := p.Value
		switch {
		case def.Bool && def.NoOp:
			// --get-user-env[=timeout][mode]: any value, all ignored.
			value = "true"
		case def.Bool:
			if p.HasValue {
				if _, err := parseBool(value); err != nil {
					problems = append(problems, fmt.Sprintf("--%s %v; write it alone", def.Name, err))
					continue
				}
			} else {
				value = "true"
			}
		case !p.HasValue:
			value = def.Optional
		}
		opts = append(opts, Option{Name: def.Name, Value: value, Source: src})
	}
	return opts, problems
}

// tokenize splits a directive line like a shell would: blanks separate,
// quotes group, a backslash escapes, and an unquoted # starting a word
// begins a comment.
func tokenize(s string) ([]string, error) {
	var (
		toks  []string
		cur   strings.Builder
		inTok bool
		quote byte
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			switch {
			case c == quote:
				quote = 0
			case c == '\\' && quote == '"' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
				i++
				cur.WriteByte(s[i])
			default:
				cur.WriteByte(c)
			}
		case c == ' ' || c == '\t':
			if inTok {
				toks = append(toks, cur.String())
				cur.Reset()
				inTok = false
			}
		case c == '#' && !inTok:
			return toks, nil
		case c == '\'' || c == '"':
			quote, inTok = c, true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inTok = true
		default:
			cur.WriteByte(c)
			inTok = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote; close it on the same line", quote)
	}
	if inTok {
		toks = append(toks, cur.String())
	}
	return toks, nil
}
