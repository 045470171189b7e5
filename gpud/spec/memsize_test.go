package spec

import "testing"

func TestParseMemSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "500M", want: 500}, {in: "500m", want: 500}, {in: "954M", want: 954},
		{in: "8gb", want: 8 << 10}, {in: "20GB", want: 20 << 10}, {in: "512GiB", want: 512 << 10},
		{in: "4G", want: 4 << 10}, {in: "1T", want: 1 << 20}, {in: "1TB", want: 1 << 20},
		{in: "2048", want: 2048}, {in: "1025K", want: 2}, {in: "1KB", want: 1}, {in: "0", want: 0},
		{in: "1024T", want: 1 << 30},
		{in: "", err: true}, {in: "G", err: true}, {in: "GB", err: true}, {in: "B", err: true},
		{in: "1.5G", err: true}, {in: "-1G", err: true}, {in: "4X", err: true}, {in: "4BB", err: true},
		{in: "1025T", err: true}, {in: "99999999999999999999T", err: true}, {in: "4 G", err: true},
	} {
		got, err := ParseMemSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseMemSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
