package server

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// watchMaxAge bounds one assignments watch stream: the node asks again,
// and its credentials are checked again, at least this often (a revoked
// credential's connection is closed at once: auth.Revocations.Set; an
// expiring one ends the stream when it expires: watchEnd).
const watchMaxAge = 10 * time.Minute

// watchEnd is when a stream that began at began ends at the latest:
// after watchMaxAge, or when the node token it was opened with stops
// being taken (expires: its expiry plus the verifier's skew), so that no
// line goes out on a token no new request would be taken with.
func watchEnd(began, expires time.Time) time.Time {
	end := began.Add(watchMaxAge)
	if !expires.IsZero() && expires.Before(end) {
		end = expires
	}
	return end
}

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
// goes, after watchMaxAge or when its credential expires (watchEnd),
// when this controller stops leading its HA
// group (the node asks again and is answered as a poll is), or at the
// first error (the node asks again). The owner loop only hands each
// answer over (controller.Assignments' poller): a node that reads slowly
// holds back its own stream's next answer, never the loop.
//
// With deltas (watch=1&deltas=1, asked by api.Client.WatchAssignments)
// every line after the first carries only what changed since the line
// before (api.AssignmentsResponse.Delta): the allocations added or
// changed, each whole, and the IDs of those gone. A node holds ~8
// assignments and a change is mostly one of them; the whole set at each
// change was most of what the node decoded and the stream carried.
func (s *Server) watchAssignments(w http.ResponseWriter, r *http.Request, as controller.Caller, name string, after uint64, wait time.Duration, have string, asked bool, deltas bool) {
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
	end := watchEnd(began, who(r).expires)
	var set *sentSet
	if deltas {
		set = new(sentSet)
	}
	for lines := 0; ; lines++ {
		var sent string
		switch {
		case set == nil:
			*pb, sent = s.appendAssignments((*pb)[:0], gen, list, have, asked, nil)
		case lines == 0:
			set.diff(list, gen)
			*pb, sent = s.appendAssignments((*pb)[:0], gen, set.cur, have, asked, nil)
		default:
			set.diff(list, gen)
			*pb, sent = s.appendAssignments((*pb)[:0], gen, nil, have, asked, set)
		}
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
		left := time.Until(end)
		if left <= 0 || !s.leading() {
			return
		}
		after = gen
		waited = time.Now()
		s.longPoll(w, min(wait, left))
		if gen, list, err = s.pollAssignments(r, as, name, after, min(wait, left), have, asked); err != nil {
			// The node asks again: its next request gets the error, or
			// an answer, as a poll does.
			s.log.Debug("assignments watch stream ends", "node", name, "err", err)
			return
		}
		if !s.leading() || !time.Now().Before(end) {
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

// sentSet is what a delta stream has sent its node: per allocation, in ID
// order, the job's published view and the rest of the assignment's JSON
// (its envelope: the allocation, stop, signal, gate, ...) as last sent.
// diff compares the node's set at a change with it: an assignment goes on
// the line when its view is another (a job's view is replaced at each of
// its changes, never changed) or its envelope's bytes differ, so the line
// carries every difference a whole set would show.
type sentSet struct {
	gen  uint64
	ents []sentEnt
	buf  []byte // ents' envelopes
	next []sentEnt
	nbuf []byte

	// The line diff made: base is the generation it applies to; cur the
	// node's set (copies, by allocation ID; start times as sent), changed
	// the indices in cur of what the line carries, removed the IDs gone.
	base    uint64
	cur     []controller.Assignment
	changed []int
	removed []string
}

type sentEnt struct {
	alloc    string
	view     *controller.JobView
	start    time.Time
	from, to int // the envelope in buf
}

// startTolerance is how far an allocation's start (as the controller
// answers it: the stamped start moved by how far its wall clock was
// stepped since, read with the monotonic clock, so it jitters by the
// nanoseconds between the two clocks' readings) may move before a delta
// stream sends the allocation again. Within it the node keeps the start
// it was sent: its time limit is measured within a millisecond of the
// true start; a step of the controller's clock moves it by more and is
// sent.
const startTolerance = time.Millisecond

// noJob appends no job: the envelope alone is compared.
func noJob(b []byte) []byte { return b }

func byAlloc(a, b controller.Assignment) int { return strings.Compare(a.Alloc.ID, b.Alloc.ID) }

// diff takes the node's set list of generation gen: it fills the line
// (base, cur, changed, removed) and keeps list as the set sent.
func (s *sentSet) diff(list []controller.Assignment, gen uint64) {
	s.base, s.gen = s.gen, gen
	// list is the controller's, shared by every poll it answered: the
	// copies are this stream's to change.
	s.cur = append(s.cur[:0], list...)
	if !slices.IsSortedFunc(s.cur, byAlloc) {
		slices.SortStableFunc(s.cur, byAlloc)
	}
	s.next, s.nbuf = s.next[:0], s.nbuf[:0]
	s.changed, s.removed = s.changed[:0], s.removed[:0]
	j := 0
	for i := range s.cur {
		a := &s.cur[i]
		for j < len(s.ents) && s.ents[j].alloc < a.Alloc.ID {
			s.removed = append(s.removed, s.ents[j].alloc)
			j++
		}
		var prev *sentEnt
		if j < len(s.ents) && s.ents[j].alloc == a.Alloc.ID {
			prev = &s.ents[j]
			j++
		}
		if prev != nil && !prev.start.IsZero() && !a.Alloc.StartTime.IsZero() && a.Alloc.StartTime.Sub(prev.start).Abs() < startTolerance {
			a.Alloc.StartTime = spec.Time{Time: prev.start}
		}
		from := len(s.nbuf)
		one := wireAssignment(a)
		s.nbuf = one.AppendJSONWithJob(s.nbuf, noJob)
		if prev == nil || a.View == nil || a.View != prev.view || !bytes.Equal(s.nbuf[from:], s.buf[prev.from:prev.to]) {
			s.changed = append(s.changed, i)
		}
		s.next = append(s.next, sentEnt{alloc: a.Alloc.ID, view: a.View, start: a.Alloc.StartTime.Time, from: from, to: len(s.nbuf)})
	}
	for ; j < len(s.ents); j++ {
		s.removed = append(s.removed, s.ents[j].alloc)
	}
	s.ents, s.next = s.next, s.ents
	s.buf, s.nbuf = s.nbuf, s.buf
	clear(s.next) // the views of the set before: not kept alive
}
