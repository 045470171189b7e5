package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Series is one line of a plot.
type Series struct {
	Name string
	X, Y []float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

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
// are drawn at the smallest positive value).
func WriteSVG(w io.Writer, title, xlabel, ylabel string, logX bool, series []Series) error {
	const W, H, L, R, T, B = 760.0, 460.0, 70.0, 170.0, 40.0, 50.0
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	tx := func(x float64) float64 {
		if logX {
			return math.Log10(max(x, 1))
		}
		return x
	}
	for _, s := range series {
		for i := range s.X {
			xmin, xmax = min(xmin, tx(s.X[i])), max(xmax, tx(s.X[i]))
			ymax = max(ymax, s.Y[i])
		}
	}
	if math.IsInf(xmin, 0) || xmax == xmin {
		xmin, xmax = 0, max(1, xmax)
	}
	if math.IsInf(ymax, 0) || ymax <= 0 {
		ymax = 1
	}
	px := func(x float64) float64 { return L + (tx(x)-xmin)/(xmax-xmin)*(W-L-R) }
	py := func(y float64) float64 { return H - B - (y-ymin)/(ymax-ymin)*(H-T-B) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="22" font-size="15">%s</text>`+"\n", L, esc(title))
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n",
		L, H-B, W-R, H-B, L, T, L, H-B)
	for k := 0; k <= 5; k++ {
		xv := xmin + (xmax-xmin)*float64(k)/5
		label := fmt.Sprintf("%.3g", xv)
		if logX {
			label = dur(math.Pow(10, xv))
		}
		x := L + float64(k)/5*(W-L-R)
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", x, H-B+16, label)
		yv := ymin + (ymax-ymin)*float64(k)/5
		y := H - B - float64(k)/5*(H-T-B)
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%.3g</text><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>`+"\n",
			L-6, y+4, yv, L, y, W-R, y)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (L+W-R)/2, H-10, esc(xlabel))
	fmt.Fprintf(&b, `<text x="16" y="%g" transform="rotate(-90 16 %g)" text-anchor="middle">%s</text>`+"\n", (T+H-B)/2, (T+H-B)/2, esc(ylabel))
	for i, s := range series {
		c := palette[i%len(palette)]
		var pts []string
		for k := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[k]), py(s.Y[k])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"/><text x="%g" y="%g">%s</text>`+"\n",
			W-R+10, T+10+float64(i)*18, W-R+30, T+10+float64(i)*18, c, W-R+35, T+14+float64(i)*18, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
