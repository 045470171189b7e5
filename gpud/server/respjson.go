package server

import (
	"net/http"
	"strconv"

	"github.com/gpud/gpud/gpud/spec"
)

// jsonContentType is the Content-Type header's value, one slice shared
// by every answer: Header.Set makes a slice per call (net/http only reads
// it; an Add would append into a new array).
var jsonContentType = []string{"application/json"}

// writeSubmitted answers a submission with its ids: json.Encoder's bytes
// (newline included), by hand. The live path's most frequent answer, it
// went through writeJSON's reflection (and its boxing into an interface)
// at every submission.
func (s *Server) writeSubmitted(w http.ResponseWriter, ids []spec.JobID) {
	var buf [128]byte
	s.writeRaw(w, appendSubmitted(buf[:0], ids))
}

// appendSubmitted appends api.SubmitResponse{ID: ids[0], IDs: ids} as
// json.Encoder writes it.
func appendSubmitted(b []byte, ids []spec.JobID) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, uint64(ids[0]), 10)
	b = append(b, `,"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, "],\"expected_start\":null}\n"...)
}

// writeAcked answers a node's events post (api.EventsResponse), as
// writeSubmitted does a submission.
func (s *Server) writeAcked(w http.ResponseWriter, seq uint64) {
	var buf [64]byte
	b := append(buf[:0], `{"acked_seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	s.writeRaw(w, append(b, "}\n"...))
}

func (s *Server) writeRaw(w http.ResponseWriter, b []byte) {
	w.Header()["Content-Type"] = jsonContentType
	if _, err := w.Write(b); err != nil {
		s.log.Debug("write response", "err", err)
	}
}
