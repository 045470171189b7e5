package controller

import (
	"context"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// maxRecordQueue bounds the jobs held for a failing recorder; beyond it
// the oldest are dropped (and logged), since the state store still has them.
const maxRecordQueue = 100000

func (c *Controller) enqueueRecords(jobs []spec.Job) {
	if c.recorder == nil {
		return
	}
	c.recMu.Lock()
	c.recQueue = append(c.recQueue, jobs...)
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
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			c.flushRecords(fctx)
			cancel()
			return
		case <-c.recWake:
		case <-retry:
		}
		if c.flushRecords(ctx) {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
		}
	}
}

func (c *Controller) flushRecords(ctx context.Context) bool {
	c.recMu.Lock()
	batch := c.recQueue
	c.recQueue = nil
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
	c.wakeFeed()
	return true
}
