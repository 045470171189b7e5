package sim

import (
	"io"
	"time"

	"github.com/gpud/gpud/gpud/plot"
)

// Series is one line of a plot.
type Series = plot.Series

// CDF turns sorted values into a CDF series (at most 400 points).
func CDF(name string, sorted []float64) Series {
	s := Series{Name: name}
	n := len(sorted)
	step := max(1, n/400)
	for i := 0; i < n; i += step {
		s.X = append(s.X, sorted[i])
		s.Y = append(s.Y, float64(i+1)/float64(n))
	}
	if n > 0 {
		s.X = append(s.X, sorted[n-1])
		s.Y = append(s.Y, 1)
	}
	return s
}

// UtilisationSeries averages the busy-GPU step function over buckets
// (at most 300) and returns utilisation in [0,1] against time in days.
func UtilisationSeries(r *Result) Series {
	s := Series{Name: r.Policy}
	if len(r.Busy) < 2 || r.TotalGPUs == 0 {
		return s
	}
	t0, t1 := r.Busy[0].T, r.Busy[len(r.Busy)-1].T
	nb := 300
	width := max((t1-t0)/time.Duration(nb), time.Second)
	acc := make([]float64, nb+1)
	for i := 0; i+1 < len(r.Busy); i++ {
		a, b, v := r.Busy[i].T, r.Busy[i+1].T, r.Busy[i].V
		for a < b {
			k := int((a - t0) / width)
			end := min(b, t0+time.Duration(k+1)*width)
			acc[min(k, nb)] += v * (end - a).Seconds()
			a = end
		}
	}
	for k := range acc {
		s.X = append(s.X, (time.Duration(k)*width+width/2).Hours()/24)
		s.Y = append(s.Y, acc[k]/width.Seconds()/float64(r.TotalGPUs))
	}
	return s
}

// WriteSVG draws series as lines; logX uses a log10 x axis (values ≤ 0
// are drawn at the smallest positive value) labelled as durations.
func WriteSVG(w io.Writer, title, xlabel, ylabel string, logX bool, series []Series) error {
	l := plot.Lines{Title: title, XLabel: xlabel, YLabel: ylabel, LogX: logX, Series: series}
	if logX {
		l.XTick = dur
	}
	return plot.WriteSVG(w, l)
}
