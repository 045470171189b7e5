package controller

import (
	"context"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// maxRecordQueue bounds the jobs held for a failing recorder; beyond it
// the oldest are dropped (and logged), since the state store still has them.
const maxRecordQueue = 100000

// Recorder batching. A flush is one accounting transaction (one fsync),
// and its cost is mostly per transaction, not per job: flushing at every
// owner commit that ended a job wrote batches of about 4 jobs in gpud
// loadtest's live burst on 1,000 nodes (~4,400 transactions for 20,000
// jobs; their commits were 3 % of the controller's CPU). So a wake waits
// up to recordLinger for more, unless recordBatchNow records are already
// queued. Nothing is less durable for it: the state store holds every
// ended job, and a restart records again what accounting lacks
// (RecordChecker); accounting (sacct, the usage feed) hears of an end
// up to recordLinger later.
const (
	recordLinger   = 50 * time.Millisecond
	recordBatchNow = 256
)

// WithRecordLinger sets how long the recorder waits for more ended jobs
// before writing a batch (recordLinger by default; 0 writes at once).
func WithRecordLinger(d time.Duration) Option {
	return func(c *Controller) { c.recLinger = d }
}

// recQueued is how many records wait for the recorder.
func (c *Controller) recQueued() int {
	c.recMu.Lock()
	defer c.recMu.Unlock()
	return len(c.recQueue) + len(c.evQueue) + len(c.rvQueue) + len(c.stepQueue)
}

// lingerRecords waits, after a wake, for more records to join the batch:
// until recordBatchNow are queued, c.recLinger has passed, a reader asks
// for them (FlushRecords; its reply is returned) or ctx ends.
func (c *Controller) lingerRecords(ctx context.Context) []chan struct{} {
	if c.recLinger <= 0 || c.recQueued() >= recordBatchNow {
		return nil
	}
	t := time.NewTimer(c.recLinger)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		case r := <-c.recFlush:
			return []chan struct{}{r}
		case <-c.recWake:
			if c.recQueued() >= recordBatchNow {
				return nil
			}
		}
	}
}

// recordFlushWait bounds how long FlushRecords waits for the recorder.
const recordFlushWait = 2 * time.Second

// FlushRecords has the recorder write what it holds now, and returns once
// it did (or tried: a failing accounting database is retried later), or
// after recordFlushWait. A reader of accounting (sacct, gpuq acct) calls
// it first, so a job that ended before the call is in what it reads,
// whatever the recorder's linger.
func (c *Controller) FlushRecords(ctx context.Context) {
	if c.recorder == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, recordFlushWait)
	defer cancel()
	reply := make(chan struct{})
	select {
	case c.recFlush <- reply:
	case <-ctx.Done():
		return
	}
	select {
	case <-reply:
	case <-ctx.Done():
	}
}

func (c *Controller) enqueueRecords(jobs []spec.Job) {
	if c.recorder == nil {
		return
	}
	c.recMu.Lock()
	c.recQueue = append(c.recQueue, jobs...)
	if c.feed != nil {
		c.recSeq++
		c.unfed = appendUnfed(c.unfed, jobs, c.recSeq)
		if over := len(c.unfed) - maxRecordQueue; over > 0 {
			// The feed has not read for long (accounting failing): bound
			// what waits for it, as the queue is bounded.
			c.unfed = append([]unfedUsage(nil), c.unfed[over:]...)
		}
	}
	if over := len(c.recQueue) - maxRecordQueue; over > 0 {
		c.log.Error("accounting recorder is behind; dropping ended jobs from its queue", "dropped", over)
		c.recQueue = append([]spec.Job(nil), c.recQueue[over:]...)
	}
	c.recMu.Unlock()
	select {
	case c.recWake <- struct{}{}:
	default:
	}
}

// recordLoop hands ended jobs to the Recorder in batches, off the owner
// loop, retrying failed batches with backoff. At stop it makes one last
// attempt.
func (c *Controller) recordLoop(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		var retry <-chan time.Time
		if backoff > 0 {
			retry = time.After(backoff)
		}
		var replies []chan struct{} // FlushRecords callers waiting for this flush
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			c.flushRecords(fctx)
			cancel()
			return
		case <-c.recWake:
			replies = c.lingerRecords(ctx)
			if ctx.Err() != nil {
				continue // the stop above flushes (and FlushRecords times out)
			}
		case r := <-c.recFlush:
			replies = append(replies, r)
		case <-retry:
		}
		if c.flushRecords(ctx) {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
		}
		for _, r := range replies {
			close(r)
		}
	}
}

// NodeEventRecorder is implemented by a Recorder that keeps node
// availability events (down, up, drain, resume): gpuq report cluster
// derives down GPU-hours from them.
type NodeEventRecorder interface {
	RecordNodeEvents(ctx context.Context, evs []spec.NodeEvent) error
}

// nodeEvent notes a change of n's availability for the recorder; it
// reaches it after tx commits, off the owner loop.
func (c *Controller) nodeEvent(tx *txn, node, event, reason, actor string) {
	tx.nodeEvents = append(tx.nodeEvents, spec.NodeEvent{Time: c.now(), Node: node, Event: event, Reason: reason, Actor: actor})
}

func (c *Controller) enqueueNodeEvents(evs []spec.NodeEvent) {
	if len(evs) == 0 {
		return
	}
	if _, ok := c.recorder.(NodeEventRecorder); !ok {
		return
	}
	c.recMu.Lock()
	c.evQueue = append(c.evQueue, evs...)
	if over := len(c.evQueue) - maxRecordQueue; over > 0 {
		c.log.Error("accounting recorder is behind; dropping node events from its queue", "dropped", over)
		c.evQueue = append([]spec.NodeEvent(nil), c.evQueue[over:]...)
	}
	c.recMu.Unlock()
	select {
	case c.recWake <- struct{}{}:
	default:
	}
}

// flushNodeEvents hands the queued node events to the recorder; a failed
// batch goes back to the front of the queue.
func (c *Controller) flushNodeEvents(ctx context.Context) bool {
	c.recMu.Lock()
	batch := c.evQueue
	c.evQueue = nil
	c.recMu.Unlock()
	if len(batch) == 0 {
		return true
	}
	if err := c.recorder.(NodeEventRecorder).RecordNodeEvents(ctx, batch); err != nil {
		c.log.Warn("recording node events failed; will retry", "events", len(batch), "err", err)
		c.recMu.Lock()
		c.evQueue = append(batch, c.evQueue...)
		c.recMu.Unlock()
		return false
	}
	return true
}

func (c *Controller) flushRecords(ctx context.Context) bool {
	evOK := c.flushNodeEvents(ctx)
	rvOK := c.flushResvRecords(ctx)
	stepsOK := c.flushSteps(ctx)
	return c.flushJobRecords(ctx) && evOK && rvOK && stepsOK
}

// ReservationRecorder is implemented by a Recorder that keeps
// reservation windows (sreport reservation utilization).
type ReservationRecorder interface {
	RecordReservations(ctx context.Context, recs []spec.ResvRecord) error
}

func (c *Controller) enqueueResvRecords(recs []spec.ResvRecord) {
	if len(recs) == 0 {
		return
	}
	if _, ok := c.recorder.(ReservationRecorder); !ok {
		return
	}
	c.recMu.Lock()
	c.rvQueue = append(c.rvQueue, recs...)
	if over := len(c.rvQueue) - maxRecordQueue; over > 0 {
		c.log.Error("accounting recorder is behind; dropping reservation windows from its queue", "dropped", over)
		c.rvQueue = append([]spec.ResvRecord(nil), c.rvQueue[over:]...)
	}
	c.recMu.Unlock()
	select {
	case c.recWake <- struct{}{}:
	default:
	}
}

// flushResvRecords hands the queued reservation windows to the recorder,
// in order; a failed batch goes back to the front of the queue.
func (c *Controller) flushResvRecords(ctx context.Context) bool {
	c.recMu.Lock()
	batch := c.rvQueue
	c.rvQueue = nil
	c.recMu.Unlock()
	if len(batch) == 0 {
		return true
	}
	if err := c.recorder.(ReservationRecorder).RecordReservations(ctx, batch); err != nil {
		c.log.Warn("recording reservation windows failed; will retry", "windows", len(batch), "err", err)
		c.recMu.Lock()
		c.rvQueue = append(batch, c.rvQueue...)
		c.recMu.Unlock()
		return false
	}
	return true
}

func (c *Controller) flushJobRecords(ctx context.Context) bool {
	c.recMu.Lock()
	batch, seq := c.recQueue, c.recSeq
	// The next batch is likely about as long: one array of that size
	// rather than a chain of doublings from nil (a spec.Job is 1,360
	// bytes), bounded so a backlog's flush does not reserve as much again.
	// The batch's own array is not reused: a Recorder (the HA group's)
	// may keep it.
	c.recQueue = make([]spec.Job, 0, min(len(batch), 2*recordBatchNow))
	c.recMu.Unlock()
	if len(batch) == 0 {
		return true
	}
	if err := c.recorder.RecordJobs(ctx, batch); err != nil {
		c.log.Warn("recording ended jobs failed; will retry", "jobs", len(batch), "err", err)
		c.recMu.Lock()
		c.recQueue = append(batch, c.recQueue...)
		c.recMu.Unlock()
		return false
	}
	// A failed flush puts its batch back in front, so sequences are
	// flushed in order: all up to seq are in accounting now.
	if c.feed != nil {
		c.lowerFeedLow(earliestEnd(batch))
	}
	c.recFlushed.Store(seq)
	c.wakeFeed()
	return true
}

// RecordChecker is implemented by a Recorder that can say which jobs it
// already holds in a terminal state. At start the controller asks it
// about every ended job it remembers and records again the ones missing
// or stale: a kill -9 loses the recorder's in-memory queue, and the state
// store is what remembers those jobs.
type RecordChecker interface {
	// RecordedTerminal returns, of ids, those recorded in a terminal
	// state, with the attempt recorded.
	RecordedTerminal(ctx context.Context, ids []spec.JobID) (map[spec.JobID]int, error)
}

// recheckChunk is how many jobs one RecordedTerminal call and one owner
// query cover.
const recheckChunk = 500

// ended lists the terminal jobs the controller remembers (owner only).
func (c *Controller) ended() []spec.JobID {
	var ids []spec.JobID
	for id, rec := range c.st.jobs {
		if rec.job.State.Terminal() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// recheckRecords records again the jobs of ids that accounting lacks or
// holds with an older attempt. It runs on the recorder's goroutine before
// its loop; a failure is logged and leaves the jobs as they are.
func (c *Controller) recheckRecords(ctx context.Context, chk RecordChecker, ids []spec.JobID) {
	redone := 0
	for len(ids) > 0 && ctx.Err() == nil {
		chunk := ids[:min(len(ids), recheckChunk)]
		ids = ids[len(chunk):]
		have, err := chk.RecordedTerminal(ctx, chunk)
		if err != nil {
			c.log.Warn("checking accounting for ended jobs failed; those not recorded before the last stop may be missing", "err", err)
			return
		}
		var jobs []spec.Job
		err = c.query(ctx, func() error {
			for _, id := range chunk {
				rec := c.st.jobs[id]
				if rec == nil || !rec.job.State.Terminal() {
					continue
				}
				if att, ok := have[id]; ok && att >= rec.job.Attempt {
					continue
				}
				j := rec.job
				j.Alloc = cloneAlloc(rec.job.Alloc)
				c.recordModel(&j)
				jobs = append(jobs, j)
			}
			return nil
		})
		if err != nil {
			return // stopping
		}
		if len(jobs) > 0 {
			redone += len(jobs)
			c.enqueueRecords(jobs)
		}
	}
	if redone > 0 {
		c.log.Warn("recorded ended jobs accounting lacked (lost with the recorder's queue at the last stop)", "jobs", redone)
	}
}

// recordModel sets the GPU model of a job record that asked for any model
// to the model of the GPUs it got (owner only): accounting bills, prices
// and weighs by it, and gpuq report groups by it.
func (c *Controller) recordModel(j *spec.Job) {
	if j.Resources.GPUModel == "" && j.Alloc != nil && len(j.Alloc.Nodes) > 0 {
		j.Resources.GPUModel = c.gpuModel(j.Alloc.Nodes[0].Node, j.Alloc.Nodes[0].GPUs)
	}
}
