package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

const (
	anchorStart = iota
	anchorMiddle
	anchorEnd
)

// canvas is what a chart draws on; SVG and PNG implement it.
type canvas interface {
	line(x1, y1, x2, y2 float64, color string, width float64)
	polyline(pts [][2]float64, color string, width float64)
	rect(x, y, w, h float64, color string)
	text(x, y float64, s string, anchor int, size float64)
	// vtext is an axis label read bottom to top, centred on (x, y).
	vtext(x, y float64, s string)
}

type svgCanvas struct{ b strings.Builder }

func newSVG(w, h float64) *svgCanvas {
	c := &svgCanvas{}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", w, h)
	c.b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	return c
}

func (c *svgCanvas) String() string { return c.b.String() + "</svg>\n" }

func (c *svgCanvas) line(x1, y1, x2, y2 float64, col string, w float64) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%g"/>`+"\n", x1, y1, x2, y2, col, w)
}

func (c *svgCanvas) polyline(pts [][2]float64, col string, w float64) {
	s := make([]string, len(pts))
	for i, p := range pts {
		s[i] = fmt.Sprintf("%.1f,%.1f", p[0], p[1])
	}
	fmt.Fprintf(&c.b, `<polyline fill="none" stroke="%s" stroke-width="%g" points="%s"/>`+"\n", col, w, strings.Join(s, " "))
}

func (c *svgCanvas) rect(x, y, w, h float64, col string) {
	fmt.Fprintf(&c.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, max(0, w), max(0, h), col)
}

var svgAnchor = [...]string{"start", "middle", "end"}

func (c *svgCanvas) text(x, y float64, s string, anchor int, size float64) {
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%g">%s</text>`+"\n", x, y, svgAnchor[anchor], size, esc(s))
}

func (c *svgCanvas) vtext(x, y float64, s string) {
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" transform="rotate(-90 %.1f %.1f)" text-anchor="middle">%s</text>`+"\n", x, y, x, y, esc(s))
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// pngCanvas rasterises with plain squares for line width and x/image's
// fixed 7×13 font for text (one size: PNG text stays legible, not pretty).
type pngCanvas struct{ img *image.RGBA }

func newPNG(w, h float64) *pngCanvas {
	img := image.NewRGBA(image.Rect(0, 0, int(w), int(h)))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	return &pngCanvas{img: img}
}

func (c *pngCanvas) encode(w io.Writer) error { return png.Encode(w, c.img) }

func parseColor(s string) color.RGBA {
	if s == "black" {
		return color.RGBA{A: 255}
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "#"), 16, 32)
	if err != nil {
		return color.RGBA{A: 255}
	}
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}
}

func (c *pngCanvas) line(x1, y1, x2, y2 float64, col string, w float64) {
	rgba := parseColor(col)
	steps := int(math.Max(math.Abs(x2-x1), math.Abs(y2-y1))) + 1
	r := int(math.Max(0, math.Round(w/2-0.5)))
	for i := 0; i <= steps; i++ {
		t := float64(i) / float64(steps)
		x, y := int(math.Round(x1+(x2-x1)*t)), int(math.Round(y1+(y2-y1)*t))
		for dx := -r; dx <= r; dx++ {
			for dy := -r; dy <= r; dy++ {
				c.img.SetRGBA(x+dx, y+dy, rgba)
			}
		}
	}
}

func (c *pngCanvas) polyline(pts [][2]float64, col string, w float64) {
	for i := 1; i < len(pts); i++ {
		c.line(pts[i-1][0], pts[i-1][1], pts[i][0], pts[i][1], col, w)
	}
}

func (c *pngCanvas) rect(x, y, w, h float64, col string) {
	r := image.Rect(int(x), int(y), int(x+max(0, w)), int(y+max(0, h)))
	draw.Draw(c.img, r, &image.Uniform{parseColor(col)}, image.Point{}, draw.Src)
}

func (c *pngCanvas) text(x, y float64, s string, anchor int, _ float64) {
	d := &font.Drawer{Dst: c.img, Src: image.Black, Face: basicfont.Face7x13}
	w := float64(d.MeasureString(s).Round())
	switch anchor {
	case anchorMiddle:
		x -= w / 2
	case anchorEnd:
		x -= w
	}
	d.Dot = fixed.P(int(x), int(y))
	d.DrawString(s)
}

// vtext draws the label upright above the axis: the fixed font does not
// rotate.
func (c *pngCanvas) vtext(_, y float64, s string) {
	top := y - (mT+ChartHeight-mB)/2
	c.text(4, top+mT-10, s, anchorStart, 12)
}
