package plot

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"strings"
	"testing"
)

func charts() []Chart {
	return []Chart{
		Lines{Title: "GPU utilisation", XLabel: "hours", YLabel: "% of GPUs", Series: []Series{
			{Name: "allocated", X: []float64{0, 1, 2}, Y: []float64{10, 80, 50}},
			{Name: "down <&>", X: []float64{0, 1, 2}, Y: []float64{0, 5, 0}},
		}},
		Bars{Title: "GPU-hours per account", XLabel: "GPU-hours", Labels: []string{"ml", "physics"}, Values: []float64{12, 3.5}},
	}
}

// texts parses an SVG document strictly and returns its text elements.
func texts(t *testing.T, doc []byte) []string {
	t.Helper()
	var out []string
	d := xml.NewDecoder(bytes.NewReader(doc))
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed SVG: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				out = append(out, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return out
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "report.SVG", charts()...); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), `<svg xmlns="http://www.w3.org/2000/svg"`) {
		t.Fatalf("not an SVG document: %.80s", b.String())
	}
	got := strings.Join(texts(t, b.Bytes()), "|")
	for _, want := range []string{"GPU utilisation", "allocated", "down <&>", "GPU-hours per account", "ml", "physics", "12"} {
		if !strings.Contains(got, "|"+want+"|") && !strings.HasPrefix(got, want+"|") {
			t.Errorf("SVG texts %q lack %q", got, want)
		}
	}
	if n := strings.Count(b.String(), "<polyline"); n != 2 {
		t.Errorf("%d polylines, want one per series (2)", n)
	}
}

func TestWritePNG(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "report.png", charts()...); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() != int(Width) || r.Dy() != int(2*ChartHeight) {
		t.Errorf("PNG is %v, want %gx%g (two charts)", r, Width, 2*ChartHeight)
	}
	// The first series' colour is drawn somewhere.
	found := false
	for y := 0; y < img.Bounds().Dy() && !found; y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			if r, g, b, _ := img.At(x, y).RGBA(); r>>8 == 0x1f && g>>8 == 0x77 && b>>8 == 0xb4 {
				found = true
				break
			}
		}
	}
	if !found {
		t.Error("PNG has no pixel of the first series' colour")
	}
}

func TestWriteRejectsOtherFormats(t *testing.T) {
	err := Write(io.Discard, "report.pdf", charts()...)
	if err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("Write(.pdf) = %v, want an error naming .svg and .png", err)
	}
}
