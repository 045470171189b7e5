package getopt

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var squeueLike = &Set{Opts: []Opt{
	{Long: "noheader", Short: 'h', Arg: NoArg},
	{Long: "format", Short: 'o', Arg: Required},
	{Long: "Format", Short: 'O', Arg: Required},
	{Long: "user", Short: 'u', Arg: Required},
	{Long: "me", Arg: NoArg},
	{Long: "mem", Arg: Required},
	{Long: "mem-per-cpu", Arg: Required},
	{Long: "output", Arg: Required},
	{Long: "long", Short: 'l', Arg: NoArg},
	{Long: "rdma", Arg: Optional},
}}

func names(ps []Parsed) string {
	var b []string
	for _, p := range ps {
		s := p.Name()
		if p.HasValue {
			s += "=" + p.Value
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

func TestParse(t *testing.T) {
	cases := []struct {
		args       []string
		opts, rest string
		errs       string
	}{
		{args: []string{"--out", "x.log", "job.sh"}, opts: "output=x.log", rest: "job.sh"},
		{args: []string{"--out=x.log"}, opts: "output=x.log"},
		{args: []string{"-hl", "-ouser:10", "42"}, opts: "noheader long format=user:10", rest: "42"},
		{args: []string{"-hu", "alice"}, opts: "noheader user=alice"},
		{args: []string{"--mem", "4G"}, opts: "mem=4G"},
		{args: []string{"--mem-per", "4G"}, opts: "mem-per-cpu=4G"},
		{args: []string{"--rdma", "job.sh"}, opts: "rdma", rest: "job.sh"},
		{args: []string{"--rdma=2"}, opts: "rdma=2"},
		{args: []string{"--F=%i"}, opts: "Format=%i"},
		{args: []string{"--m"}, errs: "option '--m' is ambiguous; possibilities: --me --mem --mem-per-cpu"},
		{args: []string{"--frmat=x"}, errs: "unrecognized option '--frmat'; did you mean --format?"},
		{args: []string{"-x", "--me=1", "-o"}, errs: "invalid option -- 'x'|option '--me' doesn't allow an argument|option requires an argument -- 'o'"},
		{args: []string{"--user"}, errs: "option '--user' requires an argument"},
		{args: []string{"a", "--", "-h"}, rest: "a -h"},
	}
	for _, c := range cases {
		ps, rest, errs := squeueLike.Parse(c.args)
		var es []string
		for _, e := range errs {
			es = append(es, e.Msg)
		}
		got := []string{names(ps), strings.Join(rest, " "), strings.Join(es, "|")}
		want := []string{c.opts, c.rest, c.errs}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", c.args, diff)
		}
	}
}

func TestStopAtFirst(t *testing.T) {
	s := &Set{Opts: squeueLike.Opts, Mode: StopAtFirst}
	ps, rest, errs := s.Parse([]string{"-h", "job.sh", "-l", "--out", "x"})
	if len(errs) != 0 || names(ps) != "noheader" || strings.Join(rest, " ") != "job.sh -l --out x" {
		t.Errorf("got %q %q %v", names(ps), rest, errs)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "abc", 3}, {"output", "output", 0}, {"ouptut", "output", 1}, {"tiem", "time", 1}, {"gpus-per-tsk", "gpus-per-task", 1}, {"kitten", "sitting", 3}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
