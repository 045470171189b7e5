package termsafe

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestWriterEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\twith tab\n", "plain text\twith tab\n"},
		{"\x1b]0;pwned\x07", `\u001b]0;pwned\u0007`},
		{"a\rb\x7fc", `a\u000db\u007fc`},
		{"csi \u009b2J end", `csi \u009b2J end`},
		{"ünïcödé ½ \u00a0", "ünïcödé ½ \u00a0"}, // C2 A0 / C2 BD are not controls
		{"\x00", `\u0000`},
	} {
		var out bytes.Buffer
		w := New(&out)
		if n, err := w.Write([]byte(tc.in)); err != nil || n != len(tc.in) || out.String() != tc.want {
			t.Errorf("Write(%q) = %d, %v, wrote %q; want %q", tc.in, n, err, out.String(), tc.want)
		}
		// Byte by byte: a C1 control split across writes is still caught.
		out.Reset()
		w = New(&out)
		for i := range len(tc.in) {
			_, _ = w.Write([]byte{tc.in[i]})
		}
		if out.String() != tc.want {
			t.Errorf("Write(%q) byte by byte wrote %q; want %q", tc.in, out.String(), tc.want)
		}
	}
}

func TestJSONStaysValid(t *testing.T) {
	in := map[string]string{"comment": "a\x7fb\u0085c\u009bd\x1b"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := New(&out).Write(b); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out.Bytes(), "\x7f\x1b") || bytes.Contains(out.Bytes(), []byte("\u0085")) {
		t.Errorf("escaped JSON still has controls: %q", out.String())
	}
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["comment"] != in["comment"] {
		t.Errorf("escaped JSON %s decodes to %q, %v; want %q", out.String(), back["comment"], err, in["comment"])
	}
}

func TestRaw(t *testing.T) {
	var out bytes.Buffer
	w := New(&out)
	if New(w) != w || Raw(w) != &out || Raw(&out) != &out {
		t.Error("New/Raw do not unwrap")
	}
}
