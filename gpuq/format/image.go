package format

import (
	"fmt"
	"math"
	"strconv"

	"github.com/gpud/gpud/gpud/spec"
)

// CPUTime writes seconds as sacct writes TotalCPU: MM:SS.mmm under an
// hour, HH:MM:SS under a day, D-HH:MM:SS beyond.
func CPUTime(seconds float64) string {
	ms := int64(math.Round(max(seconds, 0) * 1000))
	s := ms / 1000
	d, h, m := s/86400, s/3600%24, s/60%60
	switch {
	case d > 0:
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s%60)
	case h > 0:
		return fmt.Sprintf("%02d:%02d:%02d", h, m, s%60)
	}
	return fmt.Sprintf("%02d:%02d.%03d", m, s%60, ms%1000)
}

// Bytes writes n as sacct writes a byte count (MaxDiskRead): converted
// to K, M, G, T only where it divides exactly (sacct's default
// CONVERT_NUM_UNIT_EXACT), so scripts read the exact count.
func Bytes(n int64) string {
	units := []string{"", "K", "M", "G", "T", "P"}
	i := 0
	for n >= 1024 && n%1024 == 0 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return strconv.FormatInt(n, 10) + units[i]
}

// HumanBytes writes n for people: 512B, 3.4M, 1.0G.
func HumanBytes(n int64) string {
	const units = "KMGTP"
	if n < 1024 {
		return strconv.FormatInt(n, 10) + "B"
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + units[i:i+1]
}

// ImagePull says how far the pull of j's image is ("" when none runs):
// "pulling image reg/app:1 on n1: 45% of 1.0G" (the job's own pull), or
// "prefetching image ..." while it waits.
func ImagePull(j *spec.Job) string {
	p := j.ImagePull
	if p == nil {
		return ""
	}
	verb := "pulling"
	if p.Prefetch {
		verb = "prefetching"
	}
	s := verb + " image " + j.Image + " on " + p.Node + ": "
	if p.Total <= 0 {
		return s + "resolving"
	}
	return s + strconv.Itoa(p.Percent()) + "% of " + HumanBytes(p.Total)
}

// ImageFields are scontrol show job's keys for j's image, beside Image=:
// ImagePull= while a pull runs ("pulling@n1:45%/1.0G", "prefetching@…";
// no spaces, so every key stays one word), and the current attempt's
// ImagePullTime= and ImagePullBytes= once it started (sacct's fields).
func ImageFields(j *spec.Job) []string {
	var out []string
	if p := j.ImagePull; p != nil {
		verb := "pulling"
		if p.Prefetch {
			verb = "prefetching"
		}
		v := verb + "@" + p.Node + ":"
		if p.Total > 0 {
			v += strconv.Itoa(p.Percent()) + "%/" + HumanBytes(p.Total)
		} else {
			v += "resolving"
		}
		out = append(out, "ImagePull="+v)
	}
	if a := j.Alloc; a != nil && j.Image != "" && j.Image != spec.ImageHost && !j.StartTime.IsZero() {
		var ms, n int64
		for _, p := range a.Nodes {
			ms, n = max(ms, p.PullMS), n+p.PullBytes
		}
		out = append(out, "ImagePullTime="+CPUTime(float64(ms)/1000), "ImagePullBytes="+Bytes(n))
	}
	return out
}
