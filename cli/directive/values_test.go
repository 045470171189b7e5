package directive

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "10", want: 10 * time.Minute},
		{in: "90", want: 90 * time.Minute},
		{in: "10:30", want: 10*time.Minute + 30*time.Second},
		{in: "2:00:00", want: 2 * time.Hour},
		{in: "48:00:00", want: 48 * time.Hour},
		{in: "1-12", want: 36 * time.Hour},
		{in: "1-00:30", want: 24*time.Hour + 30*time.Minute},
		{in: "1-00:00:00", want: 24 * time.Hour},
		{in: "7-23:59:59", want: 8*24*time.Hour - time.Second},
		{in: "UNLIMITED", want: Unlimited},
		{in: "infinite", want: Unlimited},
		{in: "0", want: Unlimited},
		{in: "0:00", want: Unlimited},
		{in: "", wantErr: "empty"},
		{in: "abc", wantErr: "use MM"},
		{in: "1:2:3:4", wantErr: "use MM"},
		{in: "10:60", wantErr: "0-59"},
		{in: "1-24", wantErr: "0-23"},
		{in: "-5", wantErr: "days must be a number"},
		{in: "1h", wantErr: "use MM"},
		{in: "999999999999", wantErr: "too long"},
		{in: "1-1:2:3:4", wantErr: "use MM"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTime(tc.in)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && got != tc.want {
				t.Errorf("ParseTime(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func TestParseMem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "500M", want: 500},
		{in: "500m", want: 500},
		{in: "4G", want: 4096},
		{in: "1T", want: 1 << 20},
		{in: "2048", want: 2048},
		{in: "1024K", want: 1},
		{in: "1K", want: 1},
		{in: "1025k", want: 2},
		{in: "0", want: WholeNodeMem},
		{in: "8gb", want: 8192},
		{in: "20GB", want: 20480},
		{in: "954M", want: 954},
		{in: "512GiB", want: 512 << 10},
		{in: "", wantErr: "use a whole number"},
		{in: "G", wantErr: "use a whole number"},
		{in: "1.5G", wantErr: "use a whole number"},
		{in: "4GB", want: 4096},
		{in: "4BG", wantErr: "use a whole number"},
		{in: "-1G", wantErr: "use a whole number"},
		{in: "99999999999T", wantErr: "1 PiB"},
		{in: "1025T", wantErr: "1 PiB"},
		{in: "1024T", want: 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseMem(tc.in)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && got != tc.want {
				t.Errorf("ParseMem(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseGPUSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    GPURequest
		wantErr string
	}{
		{in: "2", want: GPURequest{Count: 2}},
		{in: "h100:2", want: GPURequest{Model: "h100", Count: 2}},
		{in: "H100:2", want: GPURequest{Model: "h100", Count: 2}},
		{in: "a100-80gb:1", want: GPURequest{Model: "a100-80gb", Count: 1}},
		{in: "1g.10gb:2", want: GPURequest{Profile: "1g.10gb", Count: 2}},
		{in: "3g.40gb", want: GPURequest{Profile: "3g.40gb", Count: 1}},
		{in: "h100", want: GPURequest{Model: "h100", Count: 1}},
		{in: "0.5", want: GPURequest{Fraction: 0.5}},
		{in: ".25", want: GPURequest{Fraction: 0.25}},
		{in: "h100:0.5", want: GPURequest{Model: "h100", Fraction: 0.5}},
		{in: "0", wantErr: "count must be"},
		{in: "1.5", wantErr: "between 0 and 1"},
		{in: "1g.10gb:0.5", wantErr: "cannot be shared"},
		{in: "h100:", wantErr: "use N"},
		{in: ":2", wantErr: "type must be"},
		{in: "h100:2:3", wantErr: "use N"},
		{in: "h100:NaN", wantErr: "use N"},
		{in: "1e-1", wantErr: "use N"},
		{in: "h 100:1", wantErr: "type must be"},
		// MIG types as Slurm's AutoDetect=nvml names them (issue 26).
		{in: "nvidia_a100-sxm4-80gb_3g.40gb", want: GPURequest{Profile: "3g.40gb", Count: 1}},
		{in: "h100_80gb_hbm3_1g.10gb+me:2", want: GPURequest{Profile: "1g.10gb+me", Count: 2}},
		{in: "h100_9g.x:1", wantErr: "type must be"},
		{in: "_1g.10gb:1", wantErr: "type must be"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseGPUSpec(tc.in)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); tc.wantErr == "" && diff != "" {
				t.Errorf("ParseGPUSpec(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestParseGres(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    GPURequest
		wantErr string
	}{
		{in: "gpu", want: GPURequest{Count: 1}},
		{in: "gpu:4", want: GPURequest{Count: 4}},
		{in: "gpu:a100:2", want: GPURequest{Model: "a100", Count: 2}},
		{in: "gpu:1g.10gb:3", want: GPURequest{Profile: "1g.10gb", Count: 3}},
		{in: "gpu:h100_80gb_hbm3_1g.10gb:1", want: GPURequest{Profile: "1g.10gb", Count: 1}},
		{in: "gpu:nvidia_h100_80gb_hbm3_1g.10gb:2", want: GPURequest{Profile: "1g.10gb", Count: 2}},
		{in: "shard:2", wantErr: "only gpu"},
		{in: "gpu:2,nvme:1", wantErr: "only gpu"},
		{in: "gpu:1,gpu:2", wantErr: "twice"},
		{in: "gpu:x:y", wantErr: "bad --gres"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseGres(tc.in)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); tc.wantErr == "" && diff != "" {
				t.Errorf("ParseGres(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

// TestBeginLooksForward: --begin reads slurmtime's grammar forward, as
// sbatch does: a time of day that has passed is tomorrow's.
func TestBeginLooksForward(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Time{
		"09:00":     time.Date(2025, 3, 15, 9, 0, 0, 0, time.UTC), // testEnv.Now is 15:00
		"16:00":     time.Date(2025, 3, 14, 16, 0, 0, 0, time.UTC),
		"midnight":  time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC),
		"now+1hour": testEnv.Now.Add(time.Hour),
		"03/01":     time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
	} {
		r, err := Build([]Option{cli("begin", in)}, testEnv)
		if err != nil {
			t.Errorf("--begin=%s: %v", in, err)
			continue
		}
		if got := r.Spec.BeginTime.Time; !got.Equal(want) {
			t.Errorf("--begin=%s = %v, want %v", in, got, want)
		}
	}
}

func TestSmallParsers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fn      func() (any, error)
		want    any
		wantErr string
	}{
		{"nodes", func() (any, error) { return ParseNodes("4") }, 4, ""},
		{"nodes range equal", func() (any, error) { return ParseNodes("2-2") }, 2, ""},
		{"nodes range", func() (any, error) { return ParseNodes("2-4") }, 0, "fixed number"},
		{"nodes zero", func() (any, error) { return ParseNodes("0") }, 0, "N >= 1"},
		{"signal", func() (any, error) { return ParseSignal("USR1@120") }, "USR1@120", ""},
		{"signal batch", func() (any, error) { return ParseSignal("B:SIGTERM") }, "B:TERM@60", ""},
		{"signal number", func() (any, error) { return ParseSignal("10@5") }, "USR1@5", ""},
		{"signal number without a name", func() (any, error) { return ParseSignal("34") }, "34@60", ""},
		{"signal bad", func() (any, error) { return ParseSignal("FOO@1") }, "", "bad signal"},
		{"signal R", func() (any, error) { return ParseSignal("R:USR1@1") }, "", "not supported"},
		{"ckpt minutes", func() (any, error) { return ParseCheckpointInterval("30") }, 30 * time.Minute, ""},
		{"ckpt go", func() (any, error) { return ParseCheckpointInterval("1h30m") }, 90 * time.Minute, ""},
		{"ckpt seconds", func() (any, error) { return ParseCheckpointInterval("5s") }, 5 * time.Second, ""},
		{"ckpt too short", func() (any, error) { return ParseCheckpointInterval("500ms") }, time.Duration(0), "shorter than one second"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.fn()
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); tc.wantErr == "" && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateArrayAndDependency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"array range", ValidateArray("0-15"), ""},
		{"array list", ValidateArray("1,3,5"), ""},
		{"array step limit", ValidateArray("0-99:2%10"), ""},
		{"array reversed", ValidateArray("5-1"), "N <= M"},
		{"array zero step", ValidateArray("0-9:0"), "at least 1"},
		{"array zero limit", ValidateArray("0-9%0"), "at least 1"},
		{"array junk", ValidateArray("a-b"), "bad array spec"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkErr(t, tc.err, tc.wantErr)
		})
	}
}

// formatTime writes d in the D-HH:MM:SS form ParseTime accepts.
func formatTime(d time.Duration) string {
	s := int64(d / time.Second)
	return fmt.Sprintf("%d-%02d:%02d:%02d", s/86400, s/3600%24, s/60%60, s%60)
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"10", "1:30", "1:00:00", "1-12", "1-00:30", "2-03:04:05", "UNLIMITED", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseTime(s)
		if err != nil {
			return
		}
		if d == Unlimited {
			return
		}
		if d <= 0 || d > maxDuration || d%time.Second != 0 {
			t.Fatalf("ParseTime(%q) = %v, out of range", s, d)
		}
		back, err := ParseTime(formatTime(d))
		if err != nil || back != d {
			t.Fatalf("round trip of %q via %q = %v, %v; want %v", s, formatTime(d), back, err, d)
		}
	})
}

func FuzzParseMem(f *testing.F) {
	for _, s := range []string{"500M", "4G", "1T", "2048", "1K", "0", "1.5G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mib, err := ParseMem(s)
		if err != nil {
			return
		}
		if mib == WholeNodeMem {
			return
		}
		if mib <= 0 || mib > maxMemMiB {
			t.Fatalf("ParseMem(%q) = %d, out of range", s, mib)
		}
		if back, err := ParseMem(fmt.Sprint(mib)); err != nil || back != mib {
			t.Fatalf("round trip of %q = %d, %v; want %d", s, back, err, mib)
		}
	})
}

func FuzzParseGPUSpec(f *testing.F) {
	for _, s := range []string{"2", "h100:2", "1g.10gb:2", "0.5", "h100:0.5", "gpu:a100:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, parse := range []func(string) (GPURequest, error){ParseGPUSpec, ParseGres} {
			r, err := parse(s)
			if err != nil {
				continue
			}
			whole := r.Count > 0
			frac := r.Fraction > 0 && r.Fraction < 1
			if whole == frac || r.Count > maxGPUs {
				t.Fatalf("%q parsed to %+v: want exactly one of a count or a fraction", s, r)
			}
			if r.Model != "" && r.Profile != "" {
				t.Fatalf("%q parsed to %+v: model and profile both set", s, r)
			}
			if r.Profile != "" && frac {
				t.Fatalf("%q parsed to a shared MIG slice %+v", s, r)
			}
		}
	})
}
