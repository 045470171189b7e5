package hostlist

import (
	"slices"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"gpu[01-03,07],login1", []string{"gpu01", "gpu02", "gpu03", "gpu07", "login1"}, ""},
		{"node[1-4,7],gpu-[01-03]", []string{"node1", "node2", "node3", "node4", "node7", "gpu-01", "gpu-02", "gpu-03"}, ""},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}, ""},
		{"n[08-10]", []string{"n08", "n09", "n10"}, ""},
		{"[1-2]", []string{"1", "2"}, ""},
		{"gpu[01-03", nil, "unbalanced ["},
		{"gpu]", nil, "unbalanced ]"},
		{"n[0-999999999]", nil, "more than 100000 hosts"},
		{"a,,b", nil, "empty name"},
		{"n[3-1]", nil, "N <= M"},
		{"n[[1]]", nil, "nests brackets"},
		{"-n1", nil, "is not a host name"},
		{"n[1-2]/x", nil, "is not a host name"},
	} {
		got, err := Expand(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Expand(%q) error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCompress(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"gpu01", "gpu02", "gpu03", "gpu07", "login", "gpu001"}, "gpu[01-03,07],login,gpu001"},
		{[]string{"n3", "n1", "n2"}, "n[1-3]"},
		{[]string{"node1", "node2", "node3", "node4", "node7", "gpu-01", "gpu-02", "gpu-03"}, "node[1-4,7],gpu-[01-03]"},
		{[]string{"n1", "n1"}, "n1"},
		{[]string{"a"}, "a"},
		{nil, ""},
		{[]string{"n8", "n9", "n10"}, "n[8-9],n10"},
		{[]string{"x1234567890", "x1234567891"}, "x1234567890,x1234567891"},
	} {
		if got := Compress(tc.in); got != tc.want {
			t.Errorf("Compress(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRoundTrip: any list of valid host names compresses to a host list
// that expands to the same set of names, and compressing that again gives
// the same text (Compress's form is canonical for a set).
func FuzzRoundTrip(f *testing.F) {
	f.Add("gpu01 gpu02 gpu03 gpu07 login gpu001")
	f.Add("n8 n9 n10 n010 n1 1 2 a-1 a-01")
	f.Add("r1n1 r1n2 x1234567890 x.1 y_0")
	f.Fuzz(func(t *testing.T, s string) {
		var names []string
		for _, n := range strings.Fields(s) {
			if ValidName(n) && len(names) < 1000 {
				names = append(names, n)
			}
		}
		list := Compress(names)
		got, err := Expand(list)
		if len(names) == 0 {
			if list != "" {
				t.Fatalf("Compress(nothing) = %q", list)
			}
			return
		}
		if err != nil {
			t.Fatalf("Expand(Compress(%q) = %q): %v", names, list, err)
		}
		want := slices.Sorted(slices.Values(names))
		want = slices.Compact(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("Expand(Compress(%q) = %q) = %q, want the same names", names, list, got)
		}
		if again := Compress(got); again != Compress(want) {
			t.Fatalf("Compress is not canonical: %q from %q, %q from %q", again, got, Compress(want), want)
		}
	})
}
