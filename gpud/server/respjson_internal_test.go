package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestHandWrittenAnswersMatchEncoder: a submission's and an events post's
// answers by hand are json.Encoder's bytes for the same api values, and
// carry its Content-Type.
func TestHandWrittenAnswersMatchEncoder(t *testing.T) {
	t.Parallel()
	encode := func(v any) string {
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, ids := range [][]spec.JobID{{1}, {42, 43, 44}, {math.MaxUint64}, {7, 0}} {
		w := httptest.NewRecorder()
		s.writeSubmitted(w, ids)
		if want := encode(api.SubmitResponse{ID: ids[0], IDs: ids}); w.Body.String() != want {
			t.Errorf("submission of %v answered %q; want %q", ids, w.Body.String(), want)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q; want application/json", ct)
		}
	}
	for _, seq := range []uint64{0, 1, 1 << 40, math.MaxUint64} {
		w := httptest.NewRecorder()
		s.writeAcked(w, seq)
		if want := encode(api.EventsResponse{AckedSeq: seq}); w.Body.String() != want {
			t.Errorf("events acked %d answered %q; want %q", seq, w.Body.String(), want)
		}
	}
}
