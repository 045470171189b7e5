package format

import (
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func TestImageFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want string
	}{
		{CPUTime(0), "00:00.000"},
		{CPUTime(18.2345), "00:18.235"},
		{CPUTime(125.5), "02:05.500"},
		{CPUTime(3600 + 61), "01:01:01"},
		{CPUTime(2*86400 + 3*3600 + 4*60 + 5), "2-03:04:05"},
		{Bytes(0), "0"},
		{Bytes(1 << 30), "1G"},
		{Bytes(3 << 20), "3M"},
		{Bytes(1073741900), "1073741900"},
		{HumanBytes(512), "512B"},
		{HumanBytes(1536), "1.5K"},
		{HumanBytes(1 << 30), "1.0G"},
		{ImagePull(&spec.Job{}), ""},
		{ImagePull(&spec.Job{JobSpec: spec.JobSpec{Image: "reg:5000/app:1"}, ImagePull: &spec.ImagePull{Node: "n1", Done: 460 << 20, Total: 1 << 30}}),
			"pulling image reg:5000/app:1 on n1: 44% of 1.0G"},
		{ImagePull(&spec.Job{JobSpec: spec.JobSpec{Image: "reg:5000/app:1"}, ImagePull: &spec.ImagePull{Node: "n2", Prefetch: true}}),
			"prefetching image reg:5000/app:1 on n2: resolving"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
