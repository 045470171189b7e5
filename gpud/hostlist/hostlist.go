// Package hostlist reads and writes Slurm host lists: "gpu[01-04,07],login1"
// stands for gpu01, gpu02, gpu03, gpu04, gpu07 and login1. gpusubmit
// expands the lists users give (--nodelist, --exclude); gpuq and the
// Slurm-compatible commands compress node lists for display. It is a leaf
// above gpud/spec (whose ParseDigits reads its ranges' numbers).
package hostlist

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// MaxHosts bounds one expansion: "n[0-999999999]" is a typo, not a
// cluster.
const MaxHosts = 100000

// maxDigits is the longest number Compress ranges over; longer numeric
// tails are left as plain names.
const maxDigits = 9

// ValidName reports whether s is a host name a list may hold: a letter or
// digit, then letters, digits, '.', '_' or '-'.
func ValidName(s string) bool {
	if s == "" || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Expand expands a host list into names, in the list's order, keeping
// zero padding ("n[08-10]" is n08, n09, n10). Bracket groups may repeat
// within a name ("r[1-2]n[1-2]" is r1n1, r1n2, r2n1, r2n2) but not nest.
func Expand(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("bad host list %q: unbalanced ]", s)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("bad host list %q: unbalanced [", s)
		}
		item := s[start:i]
		start = i + 1
		if item == "" {
			return nil, fmt.Errorf("bad host list %q: empty name; use name1,name2 or prefix[01-04]", s)
		}
		names, err := expandItem(item, MaxHosts-len(out))
		if err != nil {
			return nil, fmt.Errorf("bad host list %q: %w", s, err)
		}
		out = append(out, names...)
	}
	return out, nil
}

func expandItem(item string, budget int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if !ValidName(item) {
			return nil, fmt.Errorf("%q is not a host name", item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q has an unclosed [", item)
	}
	end += open
	prefix, body, suffix := item[:open], item[open+1:end], item[end+1:]
	if strings.ContainsAny(body, "[") {
		return nil, fmt.Errorf("%q nests brackets", item)
	}
	rests, err := expandItem("x"+suffix, budget)
	if err != nil {
		return nil, err
	}
	var out []string
	for r := range strings.SplitSeq(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err1 := spec.ParseDigits(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = spec.ParseDigits(hi)
		}
		if err1 != nil || err2 != nil || a > b {
			return nil, fmt.Errorf("%q: range %q must be N or N-M with N <= M", item, r)
		}
		if (b-a+1)*int64(len(rests)) > int64(budget-len(out)) {
			return nil, fmt.Errorf("%q expands to more than %d hosts", item, MaxHosts)
		}
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", len(lo), n)
			for _, rest := range rests {
				name := prefix + num + rest[1:]
				if !ValidName(name) {
					return nil, fmt.Errorf("%q is not a host name", name)
				}
				out = append(out, name)
			}
		}
	}
	return out, nil
}

// Compress writes names as a host list: gpu[01-03,07]. Names are grouped
// by the text before their numeric tail and the tail's width (so padding
// survives), in first-seen order; numbers within a group are sorted, and
// repeated names dropped. Expand(Compress(names)) gives the same set of names.
func Compress(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, ",")
	}
	type group struct {
		prefix string
		width  int
		nums   []int
	}
	var groups []*group
	var order []any
	plain := map[string]bool{}
	for _, n := range names {
		i := len(n)
		for i > 0 && n[i-1] >= '0' && n[i-1] <= '9' {
			i--
		}
		if i == len(n) || len(n)-i > maxDigits {
			if !plain[n] {
				plain[n] = true
				order = append(order, n)
			}
			continue
		}
		num, _ := strconv.Atoi(n[i:])
		var g *group
		for _, cand := range groups {
			if cand.prefix == n[:i] && cand.width == len(n)-i {
				g = cand
				break
			}
		}
		if g == nil {
			g = &group{prefix: n[:i], width: len(n) - i}
			groups = append(groups, g)
			order = append(order, g)
		}
		g.nums = append(g.nums, num)
	}
	var b strings.Builder
	for k, o := range order {
		if k > 0 {
			b.WriteByte(',')
		}
		switch v := o.(type) {
		case string:
			b.WriteString(v)
		case *group:
			slices.Sort(v.nums)
			v.nums = slices.Compact(v.nums)
			if len(v.nums) == 1 {
				fmt.Fprintf(&b, "%s%0*d", v.prefix, v.width, v.nums[0])
				continue
			}
			b.WriteString(v.prefix)
			b.WriteByte('[')
			for i := 0; i < len(v.nums); {
				j := i
				for j+1 < len(v.nums) && v.nums[j+1] == v.nums[j]+1 {
					j++
				}
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%0*d", v.width, v.nums[i])
				if j > i {
					fmt.Fprintf(&b, "-%0*d", v.width, v.nums[j])
				}
				i = j + 1
			}
			b.WriteByte(']')
		}
	}
	return b.String()
}
