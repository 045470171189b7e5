// Package getopt parses command lines the way glibc's getopt_long does, so
// gpud's Slurm-named commands (sbatch, squeue, ...) take what Slurm's take:
// unique prefixes of long options (--out for --output), bundled short
// options (-nu), "--opt value" as well as "--opt=value", optional values
// only after "=", and "--" ending the options.
package getopt

import (
	"fmt"
	"slices"
	"strings"
)

// ArgKind says whether an option takes a value.
type ArgKind int

// Argument kinds, as getopt_long's no_argument, required_argument and
// optional_argument.
const (
	NoArg ArgKind = iota
	Required
	Optional
)

// Opt is one option of a command.
type Opt struct {
	// Long is the long name without dashes ("output"); "" for a short-only option.
	Long string
	// Short is the one-letter form, 0 for none. With Arg Optional the
	// short form takes no value (-H), only the long one (--hold=no).
	Short byte
	Arg   ArgKind
}

// Name is how a parsed option is reported: the long name, else the letter.
func (o Opt) Name() string {
	if o.Long != "" {
		return o.Long
	}
	return string(o.Short)
}

// Parsed is one option found on the command line.
type Parsed struct {
	Opt Opt
	// Value is the option's value; HasValue is false for a switch or an
	// optional value not given.
	Value    string
	HasValue bool
	// As is the option as the user wrote it ("--out", "-o"), for messages.
	As string
}

// Name is the option's canonical name (Opt.Name).
func (p Parsed) Name() string { return p.Opt.Name() }

// Error is a usage error: an unknown, ambiguous or malformed option.
type Error struct {
	// Option is the word at fault ("--frmat"), Msg the explanation.
	Option string
	Msg    string
	Kind   ErrorKind
	// Name is the option's name as written, without dashes ("frmat").
	Name string
}

// ErrorKind classifies usage errors, so a command can word its own.
type ErrorKind int

// Kinds of usage errors.
const (
	Unknown ErrorKind = iota
	Ambiguous
	NeedsValue
	TakesNoValue
)

func (e *Error) Error() string { return e.Msg }

// Mode says how non-option words are handled.
type Mode int

const (
	// Permute collects non-option words wherever they appear (GNU's
	// default: squeue 42 -h).
	Permute Mode = iota
	// StopAtFirst ends option parsing at the first non-option word
	// (getopt's "+" mode: sbatch SCRIPT --script-args).
	StopAtFirst
)

// Set is a command's option table.
type Set struct {
	Opts []Opt
	Mode Mode
}

// Parse reads args (without the program name). It returns the options in
// order, the other words, and every usage error found (parsing goes on
// after an error, as getopt does, so the user sees them all at once).
func (s *Set) Parse(args []string) ([]Parsed, []string, []*Error) {
	var (
		out  []Parsed
		rest []string
		errs []*Error
	)
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return out, append(rest, args[i+1:]...), errs
		case len(a) < 2 || a[0] != '-':
			if s.Mode == StopAtFirst {
				return out, append(rest, args[i:]...), errs
			}
			rest = append(rest, a)
		case a[1] == '-':
			name, value, hasValue := strings.Cut(a[2:], "=")
			o, err := s.LookupLong(name)
			if err != nil {
				kind := Unknown
				if strings.Contains(err.Error(), "ambiguous") {
					kind = Ambiguous
				}
				errs = append(errs, &Error{Option: "--" + name, Msg: err.Error(), Kind: kind, Name: name})
				continue
			}
			p := Parsed{Opt: o, As: "--" + name}
			switch o.Arg {
			case NoArg:
				if hasValue {
					errs = append(errs, &Error{Option: a, Msg: fmt.Sprintf("option '--%s' doesn't allow an argument", o.Long), Kind: TakesNoValue, Name: o.Long})
					continue
				}
			case Required:
				if !hasValue {
					if i+1 >= len(args) {
						errs = append(errs, &Error{Option: a, Msg: fmt.Sprintf("option '--%s' requires an argument", o.Long), Kind: NeedsValue, Name: o.Long})
						continue
					}
					i++
					value, hasValue = args[i], true
				}
			}
			p.Value, p.HasValue = value, hasValue
			out = append(out, p)
		default:
			// A run of short options: -nu, -o file, -ofile.
			for k := 1; k < len(a); k++ {
				c := a[k]
				o, ok := s.LookupShort(c)
				if !ok {
					errs = append(errs, &Error{Option: "-" + string(c), Msg: fmt.Sprintf("invalid option -- '%c'", c), Kind: Unknown, Name: string(c)})
					continue
				}
				p := Parsed{Opt: o, As: "-" + string(c)}
				// An optional value belongs to the long form only, so
				// switches bundle (-HW) whatever their long form takes.
				if o.Arg == Required {
					switch {
					case k+1 < len(a):
						p.Value, p.HasValue = a[k+1:], true
					case o.Arg == Required && i+1 < len(args):
						i++
						p.Value, p.HasValue = args[i], true
					case o.Arg == Required:
						errs = append(errs, &Error{Option: "-" + string(c), Msg: fmt.Sprintf("option requires an argument -- '%c'", c), Kind: NeedsValue, Name: o.Name()})
						k = len(a)
						continue
					}
					out = append(out, p)
					break
				}
				out = append(out, p)
			}
		}
	}
	return out, rest, errs
}

// LookupLong finds a long option by its name or a unique prefix of it; an
// exact name wins over longer names it prefixes (--mem, not --mem-per-cpu).
func (s *Set) LookupLong(name string) (Opt, error) {
	if name == "" {
		return Opt{}, fmt.Errorf("option '--' needs a name")
	}
	var cands []Opt
	for _, o := range s.Opts {
		if o.Long == "" {
			continue
		}
		if o.Long == name {
			return o, nil
		}
		if strings.HasPrefix(o.Long, name) {
			cands = append(cands, o)
		}
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		msg := fmt.Sprintf("unrecognized option '--%s'", name)
		if m := s.Suggest(name); m != "" {
			msg += fmt.Sprintf("; did you mean --%s?", m)
		}
		return Opt{}, fmt.Errorf("%s", msg)
	}
	names := make([]string, len(cands))
	for i, o := range cands {
		names[i] = "--" + o.Long
	}
	return Opt{}, fmt.Errorf("option '--%s' is ambiguous; possibilities: %s", name, strings.Join(names, " "))
}

// LookupShort finds a short option by its letter.
func (s *Set) LookupShort(c byte) (Opt, bool) {
	for _, o := range s.Opts {
		if o.Short == c && c != 0 {
			return o, true
		}
	}
	return Opt{}, false
}

// Suggest returns the long option nearest to name (edit distance at most
// a third of its length, at least 2), or "".
func (s *Set) Suggest(name string) string {
	best, bestD := "", max(2, len(name)/3)+1
	for _, o := range s.Opts {
		if o.Long == "" {
			continue
		}
		if d := Distance(name, o.Long); d < bestD {
			best, bestD = o.Long, d
		}
	}
	return best
}

// SuggestFrom returns the word of words nearest to name, as Suggest does.
func SuggestFrom(name string, words []string) string {
	best, bestD := "", max(2, len(name)/3)+1
	for _, w := range words {
		if d := Distance(strings.ToLower(name), strings.ToLower(w)); d < bestD {
			best, bestD = w, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, counting a swap of
// two neighbouring letters as one edit.
func Distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// Has reports whether any parsed option has name.
func Has(ps []Parsed, name string) bool {
	return slices.ContainsFunc(ps, func(p Parsed) bool { return p.Name() == name })
}

// Last returns the value of the last option named name.
func Last(ps []Parsed, name string) (string, bool) {
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].Name() == name {
			return ps[i].Value, true
		}
	}
	return "", false
}

// All returns the values of every option named name, in order.
func All(ps []Parsed, name string) []string {
	var out []string
	for _, p := range ps {
		if p.Name() == name {
			out = append(out, p.Value)
		}
	}
	return out
}
