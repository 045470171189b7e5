package plot

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
)

// Series is one line of a line chart, or one bar per X of a bar chart.
type Series struct {
	Name string
	X, Y []float64
}

// Lines is a line chart.
type Lines struct {
	Title, XLabel, YLabel string
	// LogX uses a log10 x axis (values ≤ 1 are drawn at 1).
	LogX bool
	// XTick formats an x axis label from its value (default %.3g; with
	// LogX it gets the value, not its logarithm).
	XTick  func(float64) string
	Series []Series
}

// Bars is a horizontal bar chart: one bar per label.
type Bars struct {
	Title, XLabel string
	Labels        []string
	Values        []float64
}

// Chart is a Lines or a Bars.
type Chart interface{ draw(c canvas, top float64) }

// Size of one chart; a figure stacks its charts vertically.
const (
	Width       = 760.0
	ChartHeight = 460.0
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteSVG draws charts stacked vertically as an SVG document.
func WriteSVG(w io.Writer, charts ...Chart) error {
	c := newSVG(Width, ChartHeight*float64(len(charts)))
	for i, ch := range charts {
		ch.draw(c, ChartHeight*float64(i))
	}
	_, err := io.WriteString(w, c.String())
	return err
}

// WritePNG draws charts stacked vertically as a PNG image.
func WritePNG(w io.Writer, charts ...Chart) error {
	c := newPNG(Width, ChartHeight*float64(len(charts)))
	for i, ch := range charts {
		ch.draw(c, ChartHeight*float64(i))
	}
	return c.encode(w)
}

// Write draws charts in the format the file name's extension asks for:
// .svg or .png.
func Write(w io.Writer, name string, charts ...Chart) error {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg":
		return WriteSVG(w, charts...)
	case ".png":
		return WritePNG(w, charts...)
	}
	return fmt.Errorf("cannot plot to %q: name a .svg or .png file", name)
}

// Margins of a chart's plot area.
const mL, mR, mT, mB = 70.0, 170.0, 40.0, 50.0

func (l Lines) draw(c canvas, top float64) {
	const W, H = Width, ChartHeight
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	tx := func(x float64) float64 {
		if l.LogX {
			return math.Log10(max(x, 1))
		}
		return x
	}
	for _, s := range l.Series {
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
	px := func(x float64) float64 { return mL + (tx(x)-xmin)/(xmax-xmin)*(W-mL-mR) }
	py := func(y float64) float64 { return top + H - mB - (y-ymin)/(ymax-ymin)*(H-mT-mB) }
	tick := l.XTick
	if tick == nil {
		tick = func(v float64) string { return fmt.Sprintf("%.3g", v) }
	}
	c.text(mL, top+22, l.Title, anchorStart, 15)
	c.line(mL, top+H-mB, W-mR, top+H-mB, "black", 1)
	c.line(mL, top+mT, mL, top+H-mB, "black", 1)
	for k := 0; k <= 5; k++ {
		xv := xmin + (xmax-xmin)*float64(k)/5
		if l.LogX {
			xv = math.Pow(10, xv)
		}
		x := mL + float64(k)/5*(W-mL-mR)
		c.text(x, top+H-mB+16, tick(xv), anchorMiddle, 12)
		yv := ymin + (ymax-ymin)*float64(k)/5
		y := top + H - mB - float64(k)/5*(H-mT-mB)
		c.text(mL-6, y+4, fmt.Sprintf("%.3g", yv), anchorEnd, 12)
		c.line(mL, y, W-mR, y, "#dddddd", 1)
	}
	c.text((mL+W-mR)/2, top+H-10, l.XLabel, anchorMiddle, 12)
	c.vtext(16, top+(mT+H-mB)/2, l.YLabel)
	for i, s := range l.Series {
		col := palette[i%len(palette)]
		pts := make([][2]float64, len(s.X))
		for k := range s.X {
			pts[k] = [2]float64{px(s.X[k]), py(s.Y[k])}
		}
		c.polyline(pts, col, 1.6)
		ly := top + mT + 10 + float64(i)*18
		c.line(W-mR+10, ly, W-mR+30, ly, col, 3)
		c.text(W-mR+35, ly+4, s.Name, anchorStart, 12)
	}
}

func (b Bars) draw(c canvas, top float64) {
	const W, H = Width, ChartHeight
	const left = 160.0 // room for the labels
	c.text(mL, top+22, b.Title, anchorStart, 15)
	vmax := 0.0
	for _, v := range b.Values {
		vmax = max(vmax, v)
	}
	if vmax <= 0 {
		vmax = 1
	}
	n := max(1, len(b.Labels))
	slot := (H - mT - mB) / float64(n)
	bar := min(slot*0.7, 28)
	right := W - 90
	px := func(v float64) float64 { return left + v/vmax*(right-left) }
	c.line(left, top+mT, left, top+H-mB, "black", 1)
	c.line(left, top+H-mB, right, top+H-mB, "black", 1)
	for k := 0; k <= 4; k++ {
		v := vmax * float64(k) / 4
		c.text(px(v), top+H-mB+16, fmt.Sprintf("%.3g", v), anchorMiddle, 12)
	}
	c.text((left+right)/2, top+H-10, b.XLabel, anchorMiddle, 12)
	for i, l := range b.Labels {
		y := top + mT + float64(i)*slot + (slot-bar)/2
		c.rect(left, y, px(b.Values[i])-left, bar, palette[i%len(palette)])
		c.text(left-6, y+bar/2+4, l, anchorEnd, 12)
		c.text(px(b.Values[i])+6, y+bar/2+4, fmt.Sprintf("%.4g", b.Values[i]), anchorStart, 12)
	}
}
