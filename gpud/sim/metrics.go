package sim

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// SlowdownFloor is the bounded-slowdown threshold τ: run times below it
// count as τ.
const SlowdownFloor = 10 * time.Second

// Metrics summarise a Result. Times are seconds.
type Metrics struct {
	Policy string `json:"policy"`
	// Jobs is the number of jobs that ran; Unfittable ones could not run
	// on the empty cluster, NeverStarted were still pending at the end.
	Jobs         int `json:"jobs"`
	Unfittable   int `json:"unfittable"`
	NeverStarted int `json:"never_started"`
	Killed       int `json:"killed_at_limit"`

	WaitMean   float64 `json:"wait_mean_s"`
	WaitMedian float64 `json:"wait_median_s"`
	WaitP95    float64 `json:"wait_p95_s"`
	WaitP99    float64 `json:"wait_p99_s"`
	JCTMean    float64 `json:"jct_mean_s"`
	JCTMedian  float64 `json:"jct_median_s"`
	JCTP95     float64 `json:"jct_p95_s"`
	JCTP99     float64 `json:"jct_p99_s"`
	// BSLD is the mean bounded slowdown, max(1, (wait+run)/max(run, 10 s)).
	BSLD float64 `json:"bounded_slowdown_mean"`
	// Utilisation is GPU-seconds used ÷ (GPUs × makespan).
	Utilisation float64 `json:"utilisation"`
	Makespan    float64 `json:"makespan_s"`
	// Jain is Jain's fairness index over users of their mean bounded
	// slowdown (1 = every user slowed down alike); absent without users.
	Jain        *float64 `json:"jain_users,omitempty"`
	Users       int      `json:"users,omitempty"`
	Preemptions int      `json:"preemptions"`

	Cycles int     `json:"schedule_calls"`
	Wall   float64 `json:"wall_s"`
	// Speed is simulated seconds per wall-clock second.
	Speed float64 `json:"sim_seconds_per_wall_second"`

	// TraceWaitMean and TraceBSLD are the same measures from the waits the
	// trace itself recorded (SWF), for the same jobs.
	TraceWaitMean *float64 `json:"trace_wait_mean_s,omitempty"`
	TraceBSLD     *float64 `json:"trace_bounded_slowdown_mean,omitempty"`
}

// BoundedSlowdown is max(1, (wait+run)/max(run, SlowdownFloor)).
func BoundedSlowdown(wait, run time.Duration) float64 {
	return max(1, float64(wait+run)/float64(max(run, SlowdownFloor)))
}

// Measure computes r's metrics.
func Measure(r *Result) Metrics {
	m := Metrics{Policy: r.Policy, NeverStarted: r.NeverStarted, Preemptions: r.Preemptions, Cycles: r.Cycles, Wall: r.Wall.Seconds()}
	var waits, jcts []float64
	var bsld, gpuSec float64
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	perUser := map[string][2]float64{}
	var twait, tbsld float64
	tn := 0
	for i := range r.Jobs {
		j, x := &r.Jobs[i], &r.Res[i]
		if x.Unfittable {
			m.Unfittable++
			continue
		}
		if !x.Started {
			continue
		}
		m.Jobs++
		if x.Killed {
			m.Killed++
		}
		wait, run := x.Start-j.Submit, x.End-x.Start
		waits = append(waits, wait.Seconds())
		jcts = append(jcts, (x.End - j.Submit).Seconds())
		b := BoundedSlowdown(wait, run)
		bsld += b
		gpuSec += j.GPUs() * run.Seconds()
		first, last = min(first, j.Submit), max(last, x.End)
		if j.User != "" {
			u := perUser[j.User]
			perUser[j.User] = [2]float64{u[0] + b, u[1] + 1}
		}
		if j.TraceWait >= 0 {
			twait += j.TraceWait.Seconds()
			tbsld += BoundedSlowdown(j.TraceWait, j.Runtime)
			tn++
		}
	}
	if m.Jobs == 0 {
		return m
	}
	m.WaitMean, m.WaitMedian, m.WaitP95, m.WaitP99 = summary(waits)
	m.JCTMean, m.JCTMedian, m.JCTP95, m.JCTP99 = summary(jcts)
	m.BSLD = bsld / float64(m.Jobs)
	m.Makespan = (last - first).Seconds()
	if m.Makespan > 0 && r.TotalGPUs > 0 {
		m.Utilisation = gpuSec / (float64(r.TotalGPUs) * m.Makespan)
	}
	if len(perUser) > 1 {
		xs := make([]float64, 0, len(perUser))
		for _, u := range perUser {
			xs = append(xs, u[0]/u[1])
		}
		jain := Jain(xs)
		m.Jain, m.Users = &jain, len(perUser)
	}
	if tn == m.Jobs {
		tw, tb := twait/float64(tn), tbsld/float64(tn)
		m.TraceWaitMean, m.TraceBSLD = &tw, &tb
	}
	if m.Wall > 0 {
		m.Speed = m.Makespan / m.Wall
	}
	return m
}

// Jain is Jain's fairness index (Σx)² / (n Σx²): 1 when all are equal,
// 1/n when one takes everything.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

func summary(xs []float64) (mean, median, p95, p99 float64) {
	slices.Sort(xs)
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs)), Percentile(xs, 50), Percentile(xs, 95), Percentile(xs, 99)
}

// Percentile is the nearest-rank percentile of sorted xs.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// Waits and JCTs return the sorted per-job waits and completion times in
// seconds (for CDF plots).
func (r *Result) Waits() []float64 {
	return r.per(func(j *Job, x *JobResult) time.Duration { return x.Start - j.Submit })
}

// JCTs returns sorted job completion times in seconds.
func (r *Result) JCTs() []float64 {
	return r.per(func(j *Job, x *JobResult) time.Duration { return x.End - j.Submit })
}

func (r *Result) per(f func(*Job, *JobResult) time.Duration) []float64 {
	var xs []float64
	for i := range r.Jobs {
		if r.Res[i].Started {
			xs = append(xs, f(&r.Jobs[i], &r.Res[i]).Seconds())
		}
	}
	slices.SortFunc(xs, cmp.Compare)
	return xs
}

// Average is the field-wise mean of per-window metrics (counts are
// summed); one element is returned as is.
func Average(ms []Metrics) Metrics {
	if len(ms) == 1 {
		return ms[0]
	}
	a := Metrics{Policy: ms[0].Policy}
	if len(ms) == 0 {
		return a
	}
	n := float64(len(ms))
	var jain float64
	jn := 0
	for _, m := range ms {
		a.Jobs += m.Jobs
		a.Unfittable += m.Unfittable
		a.NeverStarted += m.NeverStarted
		a.Killed += m.Killed
		a.Preemptions += m.Preemptions
		a.Cycles += m.Cycles
		a.Wall += m.Wall
		for _, p := range [][2]*float64{
			{&a.WaitMean, &m.WaitMean}, {&a.WaitMedian, &m.WaitMedian}, {&a.WaitP95, &m.WaitP95}, {&a.WaitP99, &m.WaitP99},
			{&a.JCTMean, &m.JCTMean}, {&a.JCTMedian, &m.JCTMedian}, {&a.JCTP95, &m.JCTP95}, {&a.JCTP99, &m.JCTP99},
			{&a.BSLD, &m.BSLD}, {&a.Utilisation, &m.Utilisation}, {&a.Makespan, &m.Makespan},
		} {
			*p[0] += *p[1] / n
		}
		if m.Jain != nil {
			jain += *m.Jain
			jn++
		}
		if m.TraceWaitMean != nil {
			if a.TraceWaitMean == nil {
				a.TraceWaitMean, a.TraceBSLD = new(float64), new(float64)
			}
			*a.TraceWaitMean += *m.TraceWaitMean / n
			*a.TraceBSLD += *m.TraceBSLD / n
		}
	}
	if jn > 0 {
		jain /= float64(jn)
		a.Jain = &jain
	}
	if a.Wall > 0 {
		a.Speed = a.Makespan * n / a.Wall
	}
	return a
}
