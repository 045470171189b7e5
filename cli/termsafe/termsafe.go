package termsafe

import "io"

// Writer escapes control characters on their way to an io.Writer.
type Writer struct {
	w io.Writer
	// lead is a 0xC2 byte that ended the last Write: the first half of
	// a C1 control (or of another character) split across writes.
	lead bool
}

// New wraps w (once: a Writer is returned as it is).
func New(w io.Writer) io.Writer {
	if t, ok := w.(*Writer); ok {
		return t
	}
	return &Writer{w: w}
}

// Raw returns the writer under a Writer, for output that must reach the
// terminal as it is (gpuq top's clear-screen).
func Raw(w io.Writer) io.Writer {
	if t, ok := w.(*Writer); ok {
		return t.w
	}
	return w
}

func unsafeByte(c byte) bool { return c < 0x20 && c != '\n' && c != '\t' || c == 0x7f || c == 0xc2 }

const hex = "0123456789abcdef"

func appendEscape(b []byte, r byte) []byte {
	return append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&15])
}

// Write writes p with its control characters escaped. It reports len(p)
// on success.
func (t *Writer) Write(p []byte) (int, error) {
	n := len(p)
	fast := !t.lead
	for _, c := range p {
		if unsafeByte(c) {
			fast = false
			break
		}
	}
	if fast {
		_, err := t.w.Write(p)
		return n, err
	}
	b := make([]byte, 0, len(p)+32)
	if t.lead {
		t.lead = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] < 0xa0 {
			b = appendEscape(b, p[0])
			p = p[1:]
		} else {
			b = append(b, 0xc2)
		}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == 0xc2 && i+1 == len(p):
			t.lead = true // decided by the next Write
		case c == 0xc2 && p[i+1] >= 0x80 && p[i+1] < 0xa0:
			b = appendEscape(b, p[i+1])
			i++
		case c != 0xc2 && unsafeByte(c):
			b = appendEscape(b, c)
		default:
			b = append(b, c)
		}
	}
	_, err := t.w.Write(b)
	return n, err
}
