package controller

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/spec"
)

// UsageSource is where the fairshare usage of ended attempts comes from
// (accounting.db): every attempt of every job, including the ones a
// requeue threw away and the ones the controller has forgotten, so
// fairshare survives a restart and agrees with gpuq report.
type UsageSource interface {
	// GPUUsage lists ended attempts that ended at or after since (zero:
	// all), GPUs in whole-GPU equivalents.
	GPUUsage(ctx context.Context, since time.Time) ([]spec.GPUUsage, error)
	// GPUUsageTotals sums the attempts that ended in [since, before) by
	// account, user, model and day, each with its usage's midpoint.
	GPUUsageTotals(ctx context.Context, since, before time.Time) ([]spec.GPUUsageTotal, error)
}

// WithUsageSource feeds fairshare from s; without it the controller bills
// every attempt it sees end, and after a restart the ended jobs its state
// store holds, each by its last attempt (endedusage.go).
func WithUsageSource(s UsageSource) Option {
	return func(c *Controller) { c.feed = &usageFeed{src: s} }
}

// Feed tuning. A refresh reads only the attempts that ended since the
// last one (less feedOverlap, for records that reach accounting late);
// every feedFullEvery it rereads the whole horizon, which also picks up
// anything recorded later than the overlap: as daily totals summed in
// SQLite up to feedOverlap ago, and attempt by attempt after that.
//
// Most refreshes reread only feedShortOverlap before the latest end read,
// or from the earliest end the recorder flushed since the last read
// (feedLow), if earlier: every attempt flushed since is read, however late
// it reached accounting. A fixed 10-s overlap (up to session 16) read ~10 s
// of ends at every refresh to find ~1 s of new ones (3.4 % of the
// controller's CPU in gpud loadtest's live burst; docs/fleet.md, "Session
// 17 — acct"), and missed a record later than that until the next long
// read. The whole feedOverlap is reread every feedOverlapEvery (a record
// written by anything but this controller's recorder is counted then);
// seen keeps an attempt from being counted twice. Rereading the whole
// overlap every scheduling interval cost a fifth of the controller's CPU
// in a 100,000-job burst on 1,000 nodes (gpud loadtest, docs/fleet.md):
// hundreds of attempts end each second, so it read ~100,000 rows a second
// to find a few hundred new ones.
const (
	feedOverlap      = 10 * time.Minute
	feedShortOverlap = time.Second
	feedOverlapEvery = time.Minute
	feedFullEvery    = time.Hour
	// feedMinGap is the least time between two refreshes a record flush
	// asks for (wakeFeed). The recorder flushes many times a second when
	// hundreds of jobs end each second, and each refresh rereads the
	// short overlap: waking on every flush was 9 % of the controller's
	// CPU in gpud loadtest's 100,000-job drain on 1,000 nodes.
	feedMinGap = time.Second
	// feedHorizon, in half-lives, is how far back usage is read: beyond
	// it usage weighs under 2^-30 of its first value.
	feedHorizon = 30
	// feedTimeout bounds one read, so a stuck database cannot hold the
	// first cycle back for long.
	feedTimeout = 30 * time.Second
)

// usageFeed keeps the billed and decayed usage of ended attempts per
// (account, user), refreshed by its own goroutine once per scheduling
// interval, so a cycle adds only the usage of the jobs running now and
// does no I/O. The owner reads the published totals.
type usageFeed struct {
	src       UsageSource
	published atomic.Pointer[fedUsage]

	// The rest belongs to the refreshing goroutine.
	cfg      fairshare.Config
	totals   map[[2]string]*fairshare.Past
	seen     map[usageKey]time.Time // end times of the attempts in the overlap
	mark     time.Time              // latest end time read
	floor    time.Time              // the last full read's totals end here
	lastFull time.Time
	lastLong time.Time // the last read of the whole feedOverlap
}

type usageKey struct {
	job     spec.JobID
	attempt int
	model   string
}

// fedUsage is one published read: the totals, and the recorder's flush
// sequence (Controller.recFlushed) read before it, so every attempt
// enqueued up to covered is in past.
type fedUsage struct {
	past    []fairshare.Past
	covered uint64
}

// past is the latest published usage (nil before the first read) and the
// recorder sequence it covers.
func (f *usageFeed) past() ([]fairshare.Past, uint64) {
	if p := f.published.Load(); p != nil {
		return p.past, p.covered
	}
	return nil, 0
}

// unfedUsage is an ended attempt's usage, handed to the recorder with
// enqueue sequence seq, that the feed may not have read yet: until a
// read covers seq, fairshare bills it from here. Without it an attempt
// that had just ended counted nowhere (no longer running, not yet read
// from accounting) for up to a second and the recorder's linger, and a
// cycle then ordered its account's next job as if it had used nothing
// (TestFairshareOrdersAccounts failed so under load).
type unfedUsage struct {
	u   fairshare.Usage
	seq uint64
}

// appendUnfed adds the billable usage of the ended attempts in jobs: a
// requeue's record of the attempt it ended too (attemptUsage alone gives
// it no end, the job being PENDING again, and it counted nowhere until
// the feed read it).
func appendUnfed(to []unfedUsage, jobs []spec.Job, seq uint64) []unfedUsage {
	for i := range jobs {
		if u, ok := endedAttemptUsage(&jobs[i]); ok {
			to = append(to, unfedUsage{u: u, seq: seq})
		}
	}
	return to
}

// unfedSince prunes what the feed's read (covering covered) holds and
// returns the rest's usage appended to out.
func (c *Controller) unfedSince(covered uint64, out []fairshare.Usage) []fairshare.Usage {
	c.recMu.Lock()
	defer c.recMu.Unlock()
	keep := c.unfed[:0]
	for _, e := range c.unfed {
		if e.seq > covered {
			keep = append(keep, e)
			out = append(out, e.u)
		}
	}
	clear(c.unfed[len(keep):])
	c.unfed = keep
	return out
}

// refresh reads what ended since the last read (or everything in the
// horizon, when due or when the billing policy changed) and publishes the
// new totals decayed to now.
//
// low is the earliest end time of the attempts flushed to accounting
// since the last refresh (zero: none or unknown); the read reaches back
// to it.
func (f *usageFeed) refresh(ctx context.Context, now time.Time, cfg fairshare.Config, covered uint64, low time.Time) error {
	full := f.totals == nil || now.Sub(f.lastFull) >= feedFullEvery || !sameBilling(f.cfg, cfg)
	rctx, cancel := context.WithTimeout(ctx, feedTimeout)
	defer cancel()
	var totals []spec.GPUUsageTotal
	long := now.Sub(f.lastLong) >= feedOverlapEvery
	since := f.mark.Add(-feedShortOverlap)
	if !low.IsZero() && low.Before(since) {
		since = low
	}
	if long {
		since = f.mark.Add(-feedOverlap)
	}
	if f.floor.After(since) {
		since = f.floor // before it, the totals counted everything
	}
	if full {
		from := time.Time{}
		if cfg.HalfLife > 0 {
			from = now.Add(-feedHorizon * cfg.HalfLife)
		}
		since = now.Add(-feedOverlap)
		var err error
		if totals, err = f.src.GPUUsageTotals(rctx, from, since); err != nil {
			return err
		}
	}
	rows, err := f.src.GPUUsage(rctx, since)
	if err != nil {
		return err
	}
	if full {
		f.totals, f.seen, f.mark, f.floor, f.lastFull, f.cfg = map[[2]string]*fairshare.Past{}, map[usageKey]time.Time{}, since, since, now, cfg
	}
	if full || long {
		f.lastLong = now
	}
	for _, p := range f.totals {
		p.DecayTo(now, &f.cfg)
	}
	past := func(account, user string) *fairshare.Past {
		ak := [2]string{account, user}
		p := f.totals[ak]
		if p == nil {
			p = &fairshare.Past{Account: account, User: user, At: now}
			f.totals[ak] = p
		}
		return p
	}
	for i := range totals {
		t := &totals[i]
		// A day's usage as one GPU-second-weighted second at its midpoint.
		half := 500 * time.Millisecond
		past(t.Account, t.User).Add(&fairshare.Usage{Account: t.Account, User: t.User, Model: t.Model, GPUs: t.GPUSeconds,
			Start: t.Mid.Add(-half), End: t.Mid.Add(half)}, &f.cfg)
	}
	for i := range rows {
		r := &rows[i]
		k := usageKey{r.JobID, r.Attempt, r.Model}
		if _, dup := f.seen[k]; dup {
			continue
		}
		f.seen[k] = r.End
		if r.End.After(f.mark) {
			f.mark = r.End
		}
		// An end after now (a clock step back) is billed up to now; the
		// next full read bills the rest.
		past(r.Account, r.User).Add(&fairshare.Usage{Account: r.Account, User: r.User, Model: r.Model, GPUs: r.GPUs, Start: r.Start, End: r.End}, &f.cfg)
	}
	for k, end := range f.seen {
		if end.Before(f.mark.Add(-feedOverlap)) {
			delete(f.seen, k)
		}
	}
	out := make([]fairshare.Past, 0, len(f.totals))
	for _, p := range f.totals {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b fairshare.Past) int {
		return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.User, b.User))
	})
	f.published.Store(&fedUsage{past: out, covered: covered})
	return nil
}

// sameBilling reports whether usage billed under a is still right under b.
func sameBilling(a, b fairshare.Config) bool {
	if a.HalfLife != b.HalfLife || len(a.ModelWeights) != len(b.ModelWeights) {
		return false
	}
	for m, w := range a.ModelWeights {
		if bw, ok := b.ModelWeights[m]; !ok || bw != w {
			return false
		}
	}
	return true
}

// feedLoop refreshes the usage feed every scheduling interval and after
// each batch the recorder wrote, until ctx ends. The first read happened
// before Run started serving (loadFeed).
func (c *Controller) feedLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTimer(interval)
	defer t.Stop()
	reset := func(d time.Duration) {
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(d)
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.feedWake:
			// Ended attempts were recorded: refresh soon, but at most
			// once per feedMinGap; the refresh after the gap reads them.
			if wait := min(feedMinGap, interval) - time.Since(last); wait > 0 {
				reset(wait)
				continue
			}
		}
		var cfg fairshare.Config
		var now time.Time
		err := c.query(ctx, func() error {
			cfg, now, interval = c.fairshareConfig(), c.now(), c.cfg.SchedInterval
			return nil
		})
		if err == nil {
			covered := c.recFlushed.Load()
			low := c.takeFeedLow()
			if err := c.feed.refresh(ctx, now, cfg, covered, low); err != nil && ctx.Err() == nil {
				c.lowerFeedLow(low) // the next read reaches back to it
				c.log.Warn("reading fairshare usage from accounting failed; using the last read", "err", err)
			}
		}
		last = time.Now()
		reset(interval)
	}
}

// loadFeed is the feed's first read, on the owner before it serves: the
// first cycle after a restart must see the usage from before it.
func (c *Controller) loadFeed(ctx context.Context) {
	covered := c.recFlushed.Load()
	low := c.takeFeedLow()
	if err := c.feed.refresh(ctx, c.now(), c.fairshareConfig(), covered, low); err != nil {
		c.lowerFeedLow(low)
		c.log.Warn("reading fairshare usage from accounting failed; fairshare counts running jobs only until the next read", "err", err)
	}
}

// earliestEnd is the earliest end time of jobs (zero if none ended): no
// usage row accounting writes of them ends before it.
func earliestEnd(jobs []spec.Job) time.Time {
	var low time.Time
	for i := range jobs {
		if e := jobs[i].EndTime.Time; !e.IsZero() && (low.IsZero() || e.Before(low)) {
			low = e
		}
	}
	return low
}

// lowerFeedLow makes the next feed read reach back to end (zero: no
// change). Called after a flush committed, so the read that takes it
// sees that flush's rows.
func (c *Controller) lowerFeedLow(end time.Time) {
	if end.IsZero() {
		return
	}
	c.recMu.Lock()
	if c.feedLow.IsZero() || end.Before(c.feedLow) {
		c.feedLow = end
	}
	c.recMu.Unlock()
}

// takeFeedLow returns and clears feedLow, before a read.
func (c *Controller) takeFeedLow() time.Time {
	c.recMu.Lock()
	defer c.recMu.Unlock()
	low := c.feedLow
	c.feedLow = time.Time{}
	return low
}

// wakeFeed asks for a refresh soon (ended attempts were just recorded).
func (c *Controller) wakeFeed() {
	if c.feed == nil {
		return
	}
	select {
	case c.feedWake <- struct{}{}:
	default:
	}
}
