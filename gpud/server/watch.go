package server

import (
	"net/http"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
)

// watchMaxAge bounds one assignments watch stream: the node asks again,
// and its credentials are checked again, at least this often (a revoked
// credential's connection is closed at once: auth.Revocations.Set).
const watchMaxAge = 10 * time.Minute

// defaultWatchWait is how long a watch stream goes without an answer when
// the node does not say (wait=0): an unchanged set is sent again after it,
// so that the node can tell a quiet stream from a dead one.
const defaultWatchWait = 30 * time.Second

// WatchAnswerRoute is the route label each answer on an assignments watch
// stream is observed under (WithMetrics: one observation a line, with the
// time it waited for its change), as each long poll's answer is under
// its request's route. gpud loadtest counts the answers by this name
// (gpud/loadtest, noderequests.go).
const WatchAnswerRoute = "GET /v1/nodes/{name}/assignments?watch=1 answer"

// watchAssignments answers the node's assignments as a watch stream
// (GET .../assignments?watch=1; api.Client.WatchAssignments): one answer
// on the node's open connection whose body is a sequence of the long
// poll's answers, one JSON object a line, each flushed as it is written:
// the first at once, the next at each change of the node's assignments
// (or of the revocation lists), or after wait without one. Each is the
// node's whole set, as a poll's answer is. The stream ends when the node
// goes, after watchMaxAge, when this controller stops leading its HA
// group (the node asks again and is answered as a poll is), or at the
// first error (the node asks again). The owner loop only hands each
// answer over (controller.Assignments' poller): a node that reads slowly
// holds back its own stream's next answer, never the loop.
func (s *Server) watchAssignments(w http.ResponseWriter, r *http.Request, as controller.Caller, name string, after uint64, wait time.Duration, have string, asked bool) {
	if wait <= 0 {
		wait = defaultWatchWait
	}
	s.longPoll(w, wait)
	gen, list, err := s.pollAssignments(r, as, name, after, 0, have, asked)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pb, release := answerBuf()
	defer release()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(api.HeaderWatch, "1")
	began := time.Now()
	waited := began
	for {
		var sent string
		*pb, sent = s.appendAssignments((*pb)[:0], gen, list, have, asked)
		if asked {
			have = sent // with the lists when they differed
		}
		if _, err := w.Write(*pb); err != nil {
			s.log.Debug("write assignments watch answer", "node", name, "err", err)
			return
		}
		if err := rc.Flush(); err != nil {
			s.log.Debug("flush assignments watch answer", "node", name, "err", err)
			return
		}
		if s.observe != nil {
			s.observe(WatchAnswerRoute, http.StatusOK, time.Since(waited))
		}
		if time.Since(began) > watchMaxAge || !s.leading() {
			return
		}
		after = gen
		waited = time.Now()
		s.longPoll(w, wait)
		if gen, list, err = s.pollAssignments(r, as, name, after, wait, have, asked); err != nil {
			// The node asks again: its next request gets the error, or
			// an answer, as a poll does.
			s.log.Debug("assignments watch stream ends", "node", name, "err", err)
			return
		}
		if !s.leading() {
			return
		}
	}
}

// leading reports whether this server may answer for the cluster: it
// runs alone, or leads its HA group.
func (s *Server) leading() bool {
	if s.ha == nil {
		return true
	}
	ok, _ := s.ha.Leader()
	return ok
}
