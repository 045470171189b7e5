package directive

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
)

// maxDuration bounds parsed time spans (100 years) so arithmetic on them
// never overflows and absurd values are rejected with a message.
const maxDuration = 100 * 365 * 24 * time.Hour

// TimeForms lists the accepted --time forms for error messages.
const TimeForms = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"

// Unlimited is what ParseTime returns for UNLIMITED, infinite and 0: no
// limit of the job's own (the partition's maximum still applies).
const Unlimited time.Duration = -1

// ParseTime parses a Slurm time limit.
func ParseTime(s string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		if why != "" {
			why = " (" + why + ")"
		}
		return 0, fmt.Errorf("bad time %q%s; use %s", s, why, TimeForms)
	}
	switch strings.ToLower(s) {
	case "unlimited", "infinite":
		return Unlimited, nil
	case "":
		return bad("empty")
	}
	days := int64(-1)
	rest := s
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, err := spec.ParseDigits(d)
		if err != nil {
			return bad("days must be a number")
		}
		days, rest = n, r
	}
	parts := strings.Split(rest, ":")
	nums := make([]int64, len(parts))
	for i, p := range parts {
		n, err := spec.ParseDigits(p)
		if err != nil {
			return bad("")
		}
		nums[i] = n
	}
	var total int64 // seconds
	if days >= 0 {
		// D-HH, D-HH:MM, D-HH:MM:SS
		if len(nums) > 3 {
			return bad("")
		}
		if nums[0] > 23 {
			return bad("hours after a day count must be 0-23")
		}
		mul := []int64{3600, 60, 1}
		total = days * 86400
		if days > int64(maxDuration/(24*time.Hour)) {
			return bad("too long")
		}
		for i, n := range nums {
			if i > 0 && n > 59 {
				return bad("minutes and seconds must be 0-59")
			}
			total += n * mul[i]
		}
	} else {
		var mul []int64
		switch len(nums) {
		case 1:
			mul = []int64{60}
		case 2:
			mul = []int64{60, 1}
		case 3:
			mul = []int64{3600, 60, 1}
		default:
			return bad("")
		}
		if nums[0] > int64(maxDuration/time.Second)/mul[0] {
			return bad("too long")
		}
		for i, n := range nums {
			if i > 0 && n > 59 {
				return bad("minutes and seconds must be 0-59")
			}
			total += n * mul[i]
		}
	}
	d := time.Duration(total) * time.Second
	if d > maxDuration {
		return bad("too long")
	}
	if d == 0 {
		return Unlimited, nil // Slurm: a limit of zero imposes none
	}
	return d, nil
}

// MemForms lists the accepted memory forms for error messages.
const MemForms = "a whole number with an optional K, M, G or T suffix, B or iB allowed (500M, 4G, 8gb, 1T; no suffix means MiB)"

// maxMemMiB is 1 PiB per node: larger requests are typos.
const maxMemMiB = spec.MaxMemMiB

// WholeNodeMem is what ParseMem returns for 0: as in Slurm, --mem=0 asks
// for all the memory of each node.
const WholeNodeMem int64 = -1

// ParseMem parses a Slurm memory size and returns MiB, rounding K up; 0
// gives WholeNodeMem.
func ParseMem(s string) (int64, error) {
	mib, err := spec.ParseMemSize(s)
	if err != nil {
		why := ""
		if strings.Contains(err.Error(), "PiB") {
			why = " (" + err.Error() + ")"
		}
		return 0, fmt.Errorf("bad memory size %q%s; use %s", s, why, MemForms)
	}
	if mib == 0 {
		return WholeNodeMem, nil
	}
	return mib, nil
}

// GPURequest is a parsed GPU request: Count whole GPUs (or MIG slices of
// Profile), or Fraction of one GPU.
type GPURequest struct {
	Model    string
	Profile  string
	Count    int
	Fraction float64
}

// GPUForms lists the accepted GPU request forms for error messages.
const GPUForms = "N, MODEL:N, PROFILE:N (MIG, e.g. 1g.10gb:2 or h100_80gb_hbm3_1g.10gb:2) or a fraction of one GPU (0.5, h100:0.5)"

var (
	migProfileRE = lazyRE(`^[0-9]+g\.[0-9]+gb(\+me)?$`)
	gpuModelRE   = lazyRE(`^[a-z][a-z0-9_-]{0,31}$`)
)

// IsMIGProfile reports whether s names a MIG profile ("1g.10gb").
func IsMIGProfile(s string) bool { return migProfileRE().MatchString(strings.ToLower(s)) }

// siteMIGProfile reads a MIG GRES type as Slurm's AutoDetect=nvml names
// it, the device's name and the profile joined by '_'
// ("nvidia_h100_80gb_hbm3_1g.10gb", "h100_80gb_hbm3_1g.10gb",
// "nvidia_a100-sxm4-80gb_3g.40gb"), as sites' scripts ask for it: its
// profile. gpud places MIG jobs by profile: the device part is not
// checked against the nodes' models.
func siteMIGProfile(k string) (string, bool) {
	i := strings.LastIndexByte(k, '_')
	if i <= 0 || !IsMIGProfile(k[i+1:]) || !gpuModelRE().MatchString(k[:i]) {
		return "", false
	}
	return k[i+1:], true
}

// maxGPUs bounds a count: no node has more and a bigger number is a typo.
const maxGPUs = 1 << 16

// ParseGPUSpec parses --gpus/--gpus-per-node values: "2", "h100:2",
// "1g.10gb:2", "0.5", "h100:0.5". A bare model or profile means one.
func ParseGPUSpec(s string) (GPURequest, error) {
	bad := func(why string) (GPURequest, error) {
		if why != "" {
			why = " (" + why + ")"
		}
		return GPURequest{}, fmt.Errorf("bad GPU request %q%s; use %s", s, why, GPUForms)
	}
	var r GPURequest
	kind, count, hasKind := strings.Cut(s, ":")
	if !hasKind {
		if IsMIGProfile(s) || s != "" && (s[0] < '0' || s[0] > '9') && s[0] != '.' {
			kind, count = s, "1"
		} else {
			kind, count = "", s
		}
	}
	if hasKind || kind != "" {
		k := strings.ToLower(kind)
		switch {
		case IsMIGProfile(k):
			r.Profile = k
		case gpuModelRE().MatchString(k):
			r.Model = k
		default:
			p, ok := siteMIGProfile(k)
			if !ok {
				return bad("type must be a GPU model like h100 or a MIG profile like 1g.10gb or h100_80gb_hbm3_1g.10gb")
			}
			r.Profile = p
		}
	}
	if n, err := spec.ParseDigits(count); err == nil {
		if n == 0 || n > maxGPUs {
			return bad(fmt.Sprintf("count must be 1-%d", maxGPUs))
		}
		r.Count = int(n)
		return r, nil
	}
	f, err := strconv.ParseFloat(count, 64)
	if err != nil || strings.ContainsAny(count, "eEnNxXpP_+-") || math.IsNaN(f) {
		return bad("")
	}
	if f <= 0 || f >= 1 {
		return bad("a non-whole count must be a fraction between 0 and 1")
	}
	if r.Profile != "" {
		return bad("a MIG slice cannot be shared; ask for whole slices")
	}
	r.Fraction = f
	return r, nil
}

// ParseGres parses --gres. gpud schedules only the gpu resource, so any
// other name is an error rather than silently dropped.
func ParseGres(s string) (GPURequest, error) {
	var out GPURequest
	seen := false
	for item := range strings.SplitSeq(s, ",") {
		name, rest, _ := strings.Cut(item, ":")
		if strings.ToLower(name) != "gpu" {
			return GPURequest{}, fmt.Errorf("bad --gres %q: gpud schedules only gpu (use gpu, gpu:N or gpu:TYPE:N); remove %q", s, name)
		}
		if seen {
			return GPURequest{}, fmt.Errorf("bad --gres %q: gpu is given twice; give one gpu[:TYPE]:N", s)
		}
		seen = true
		if rest == "" {
			rest = "1"
		}
		if rest == "0" || strings.HasSuffix(rest, ":0") {
			continue // gpu:0 or gpu:TYPE:0 asks for no GPUs, as in Slurm
		}
		r, err := ParseGPUSpec(rest)
		if err != nil {
			return GPURequest{}, fmt.Errorf("bad --gres %q: %w", s, err)
		}
		out = r
	}
	return out, nil
}

// ParseNodes parses a fixed -N/--nodes: "N" or "N-N" (a step inside an
// allocation); ParseNodeRange takes a job's MIN-MAX.
func ParseNodes(s string) (int, error) {
	lo, hi, err := ParseNodeRange(s)
	if err == nil && hi != lo {
		return 0, fmt.Errorf("bad node count %q: gpud allocates a fixed number of nodes here; use N (or N-N with equal ends)", s)
	}
	return lo, err
}

// ParseNodeRange parses sbatch's -N MIN[-MAX]: the job starts on as many
// nodes as fit within the range (hi == lo: a fixed count).
func ParseNodeRange(s string) (lo, hi int, err error) {
	l, h, isRange := strings.Cut(s, "-")
	a, err := spec.ParseDigits(l)
	if err != nil || a == 0 || a > 1<<20 {
		return 0, 0, fmt.Errorf("bad node count %q; use N or MIN-MAX with N >= 1 and MIN <= MAX", s)
	}
	b := a
	if isRange {
		b, err = spec.ParseDigits(h)
		if err != nil || b < a || b > 1<<20 {
			return 0, 0, fmt.Errorf("bad node count %q; use N or MIN-MAX with N >= 1 and MIN <= MAX", s)
		}
	}
	return int(a), int(b), nil
}

// parsePositive parses a count option (-n, -c, ...) in 1..max.
func parsePositive(s string, max int64) (int, error) {
	n, err := spec.ParseDigits(s)
	if err != nil || n < 1 || n > max {
		return 0, fmt.Errorf("bad count %q; use a whole number from 1 to %d", s, max)
	}
	return int(n), nil
}

var arrayRE = lazyRE(`^[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?$`)

// ValidateArray checks an --array spec: "0-15", "1,3,5", "0-15:4", "0-99%10".
func ValidateArray(s string) error {
	const forms = "use N-M, N-M:STEP, comma lists of those, and an optional %MAX (e.g. 0-99:2%10)"
	if !arrayRE().MatchString(s) {
		return fmt.Errorf("bad array spec %q; %s", s, forms)
	}
	body, limit, _ := strings.Cut(s, "%")
	if limit != "" {
		if n, err := spec.ParseDigits(limit); err != nil || n == 0 {
			return fmt.Errorf("bad array spec %q: %%MAX must be at least 1; %s", s, forms)
		}
	}
	for r := range strings.SplitSeq(body, ",") {
		span, step, _ := strings.Cut(r, ":")
		lo, hi, isRange := strings.Cut(span, "-")
		a, err1 := spec.ParseDigits(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = spec.ParseDigits(hi)
		}
		if err1 != nil || err2 != nil || a > b || b > 1_000_000 {
			return fmt.Errorf("bad array spec %q: range %q must be N-M with N <= M <= 1000000; %s", s, r, forms)
		}
		if step != "" {
			if n, err := spec.ParseDigits(step); err != nil || n == 0 {
				return fmt.Errorf("bad array spec %q: step in %q must be at least 1; %s", s, r, forms)
			}
		}
	}
	return nil
}

// ParseSignalName accepts USR1, SIGUSR1 or a number 1-64 and returns the
// canonical name without SIG ("10" gives USR1; a signal without a name
// stays a number), as gpud/signame writes it.
func ParseSignalName(s string) (string, error) {
	sig, err := signame.Parse(s)
	if err != nil {
		return "", fmt.Errorf("bad signal %q; use a name like USR1, SIGTERM or a number 1-64", s)
	}
	return signame.Name(sig), nil
}

// ParseSignal checks --signal=[B:]SIG[@SECONDS] and returns it in canonical
// form ("B:USR1@120"). Seconds default to 60 like sbatch.
func ParseSignal(s string) (string, error) {
	const forms = "use [B:]SIG[@SECONDS], e.g. USR1@120 or B:SIGTERM@60"
	rest := s
	prefix := ""
	if r, ok := strings.CutPrefix(rest, "B:"); ok {
		prefix, rest = "B:", r
	} else if strings.HasPrefix(rest, "R:") {
		return "", fmt.Errorf("bad signal %q: R: (reservation end) is not supported by gpud; %s", s, forms)
	}
	sig, secs, hasSecs := strings.Cut(rest, "@")
	name, err := ParseSignalName(sig)
	if err != nil {
		return "", fmt.Errorf("bad signal %q: %w; %s", s, err, forms)
	}
	n := int64(60)
	if hasSecs {
		n, err = spec.ParseDigits(secs)
		if err != nil || n > 65535 {
			return "", fmt.Errorf("bad signal %q: seconds must be 0-65535; %s", s, forms)
		}
	}
	return fmt.Sprintf("%s%s@%d", prefix, name, n), nil
}

// ParseCheckpointInterval accepts a Slurm time (minutes by default) or a
// Go duration ("30m", "1h30m").
func ParseCheckpointInterval(s string) (time.Duration, error) {
	d, err := ParseTime(s)
	if err != nil {
		gd, gerr := time.ParseDuration(s)
		if gerr != nil || gd <= 0 || gd > maxDuration {
			return 0, fmt.Errorf("bad checkpoint interval %q; use a Slurm time (%s) or a duration like 30m or 1h30m", s, TimeForms)
		}
		d = gd
	}
	if d <= 0 {
		return 0, fmt.Errorf("bad checkpoint interval %q: must be longer than 0; use e.g. 30 (minutes) or 1h", s)
	}
	// Seconds are allowed (demos, tests, jobs with tiny state); below one
	// second the signal would arrive before the last seal finished.
	if d < time.Second {
		return 0, fmt.Errorf("bad checkpoint interval %q: shorter than one second; use e.g. 5s, 10m or 1h", s)
	}
	return d, nil
}

// lazyRE compiles a pattern on first use: gpusubmit runs once per
// submission, and compiling every pattern at start-up took about 0.4 ms
// of each run, most of them never needed.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
