package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/safefs"
)

// Prepared containers (node.toml prepared_containers): after a job starts,
// the agent prepares containers for the next jobs of the same shape — the
// same user and groups, image, working directory, devices, CPU and memory
// limits, cores and mounts — so that such a job's start is only the start
// of its process (runtime.Preparer). A prepared container is a real one of
// its own: its own ID, cgroup, PID namespace, job directory (with its
// private /tmp) and checkpoint directory, made for that user alone; it runs
// nothing until a job claims it, and one job only ever claims it. What is
// known only when the job comes is given to it then: its labels, its
// script and a launcher (the job directory is bound in, so files written
// into it later are seen), its environment and arguments (through the
// launcher, which execs the job exactly as a cold start's process would
// run), its output files, and its checkpoint directory (the prepared
// slot, renamed to the job's: the bind follows the directory, so the job
// sees it at the slot's path, which GPUD_CHECKPOINT_DIR names). Unclaimed
// ones are destroyed after prepared_max_age, at the agent's stop, and by
// the next agent's recovery after a crash.
//
// Only single-node batch jobs use them (no MIG slice, which is made per
// job; no checkpoint to restart from, whose directory exists already;
// environment names a shell can export).

// LabelPrepared marks a container prepared ahead of its job: "1" for the
// next job of a shape, the job's ID for an expected job (expect.go); the
// claiming job's labels remove it.
const LabelPrepared = "gpud.prepared"

// preparedPrefix starts every prepared container's ID (and so its job
// and checkpoint directory names).
const preparedPrefix = "gpud-prep-"

// The placeholders a shape is computed with instead of a prepared
// container's own job and checkpoint directories.
const (
	shapeJobDir  = "/gpud-prepared/job"
	shapeCkptDir = "/gpud-prepared/checkpoint"
)

// preparedPool holds the node's prepared containers by shape.
type preparedPool struct {
	d        *runnerDeps
	prep     runtime.Preparer
	perShape int
	max      int
	maxAge   time.Duration

	mu      sync.Mutex
	byShape map[string][]*preparedCtr
	making  map[string]int // preparations under way, by shape
	total   int            // prepared plus under way
	seq     int
	closed  bool
	wg      sync.WaitGroup
	// expected are the jobs the controller expects to start here
	// (expect.go), started the jobs whose start came (by when), so that a
	// list that still names one prepares nothing more for it.
	expected map[spec.JobID]*expectation
	started  map[spec.JobID]time.Time
}

// preparedCtr is one prepared container.
type preparedCtr struct {
	id    string
	shape string
	made  time.Time
	dir   string // its job directory
	ckpt  string // its checkpoint slot
	// forJob is the expected job it was prepared for (0: for the next
	// job of a shape that started here).
	forJob spec.JobID
	// binds are the identities of its binds' sources when it was made:
	// a bind holds the directory it found, so a claim checks that each
	// path still names it (a work directory removed and made again is
	// another one, which only a new container sees).
	binds map[string]fileID
}

// fileID identifies a file on the host.
type fileID struct{ dev, ino uint64 }

// bindIDs returns the identity of each bind source of mounts (a missing
// one is left out: the container could not have been made with it).
func bindIDs(mounts []runtime.Mount) map[string]fileID {
	ids := map[string]fileID{}
	for _, m := range mounts {
		if m.Hide || m.Source == "" {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err == nil {
			ids[m.Source] = fileID{uint64(st.Dev), st.Ino}
		}
	}
	return ids
}

// stale names a bind source of c that is no longer the file it bound,
// or "".
func (c *preparedCtr) stale() string {
	for p, id := range c.binds {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || (fileID{uint64(st.Dev), st.Ino}) != id {
			return p
		}
	}
	return ""
}

// newPreparedPool returns the pool, or nil when it is off or the runtime
// cannot prepare containers.
func newPreparedPool(d *runnerDeps) *preparedPool {
	prep, ok := d.rt.(runtime.Preparer)
	if d.cfg.PreparedContainers <= 0 || !ok {
		return nil
	}
	return &preparedPool{d: d, prep: prep, perShape: d.cfg.PreparedContainers, max: d.cfg.PreparedMax,
		maxAge: d.cfg.PreparedMaxAge, byShape: map[string][]*preparedCtr{}, making: map[string]int{},
		expected: map[spec.JobID]*expectation{}, started: map[spec.JobID]time.Time{}}
}

// shapeOf is what a container fixes when it is made, as one string: cfg
// without what a claim supplies (ID, labels, command, environment,
// output files), with jobDir and ckptDir written as placeholders.
func shapeOf(cfg runtime.TaskConfig, jobDir, ckptDir string) string {
	cfg.ID, cfg.Labels, cfg.Args, cfg.Env = "", nil, nil, nil
	cfg.StdoutPath, cfg.StderrPath, cfg.TruncateOutput = "", "", false
	cfg.Mounts = rebase(cfg.Mounts, jobDir, shapeJobDir, ckptDir, shapeCkptDir)
	b, _ := json.Marshal(cfg) // plain data: cannot fail
	return string(b)
}

// shapeKey is the pool's key: shapeOf, and the digest of the image the
// container holds ("" on the host's root). A tag is resolved anew by each
// job's pull: once it names other content, a container made from the old
// content is another shape, never the job's.
func shapeKey(cfg runtime.TaskConfig, jobDir, ckptDir, digest string) string {
	return shapeOf(cfg, jobDir, ckptDir) + "\x00" + digest // JSON has no raw NUL
}

// keyDigest is the image digest of a shapeKey.
func keyDigest(key string) string { return key[strings.LastIndexByte(key, 0)+1:] }

// rebase returns mounts with paths at or below from1 (from2) moved to
// to1 (to2).
func rebase(mounts []runtime.Mount, from1, to1, from2, to2 string) []runtime.Mount {
	move := func(p string) string {
		for _, ft := range [][2]string{{from1, to1}, {from2, to2}} {
			if ft[0] == "" {
				continue
			}
			if p == ft[0] {
				return ft[1]
			}
			if rest, ok := strings.CutPrefix(p, ft[0]+"/"); ok {
				return ft[1] + "/" + rest
			}
		}
		return p
	}
	out := make([]runtime.Mount, len(mounts))
	for i, m := range mounts {
		m.Source, m.Dest = move(m.Source), move(m.Dest)
		out[i] = m
	}
	return out
}

// poolable says whether a job may run in a prepared container.
func poolable(in *taskInput, cfg runtime.TaskConfig) bool {
	if !in.batch() || len(in.Asg.Alloc.Nodes) != 1 || len(in.MIG) > 0 || in.RestartDir != "" {
		return false
	}
	for _, e := range cfg.Env {
		k, _, _ := strings.Cut(e, "=")
		if !shellName(k) {
			return false
		}
	}
	return true
}

// shellName says whether k is a name sh can export.
func shellName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, c := range k {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// launcher is the prepared container's process: it sets the job's
// environment and execs what a cold start's container would run
// (runtime.WrapperArgs: the job's command, output appended to its files).
func launcher(cfg runtime.TaskConfig) []byte {
	var b strings.Builder
	b.WriteString("# gpud: the job's start in a prepared container\n")
	for _, e := range cfg.Env {
		b.WriteString("export " + runtime.ShellQuote(e) + "\n")
	}
	b.WriteString("exec")
	for _, a := range runtime.WrapperArgs(cfg.Args, cfg.StdoutPath, cfg.StderrPath) {
		b.WriteString(" " + runtime.ShellQuote(a))
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// run starts the sweeper of old prepared containers; the returned stop
// ends it, waits for preparations under way and destroys every prepared
// container.
func (p *preparedPool) run(ctx context.Context) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// At least every second: a withdrawn expectation's container
		// goes within withdrawGrace and a second.
		every := max(min(p.maxAge/4, time.Second), 100*time.Millisecond)
		for {
			select {
			case <-sctx.Done():
				return
			case <-p.d.clock.After(every):
			}
			p.expire(sctx)
		}
	}()
	return func() {
		cancel()
		<-done
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.wg.Wait()
		p.mu.Lock()
		var all []*preparedCtr
		for _, cs := range p.byShape {
			all = append(all, cs...)
		}
		p.byShape = map[string][]*preparedCtr{}
		p.total -= len(all)
		p.mu.Unlock()
		dctx, dcancel := context.WithTimeout(context.Background(), stopCleanupTime)
		defer dcancel()
		for _, c := range all {
			p.destroy(dctx, c, "agent stopping")
		}
	}
}

// expire destroys the prepared containers older than maxAge and those
// of expectations withdrawn or aged out (expect.go).
func (p *preparedPool) expire(ctx context.Context) {
	now := p.d.clock.Now()
	var old []*preparedCtr
	p.mu.Lock()
	p.pruneExpected(now)
	for shape, cs := range p.byShape {
		keep := cs[:0]
		for _, c := range cs {
			if c.forJob != 0 && p.expected[c.forJob].holds(c) || c.forJob == 0 && now.Sub(c.made) < p.maxAge {
				keep = append(keep, c)
			} else {
				old = append(old, c)
			}
		}
		if len(keep) == 0 {
			delete(p.byShape, shape)
		} else {
			p.byShape[shape] = keep
		}
	}
	p.total -= len(old)
	p.mu.Unlock()
	for _, c := range old {
		p.destroy(ctx, c, "not claimed within prepared_max_age")
	}
}

// destroy removes a prepared container nobody claimed, its job directory
// and its checkpoint slot.
func (p *preparedPool) destroy(ctx context.Context, c *preparedCtr, why string) {
	log := p.d.log.With("container", c.id)
	log.Debug("destroying prepared container", "why", why)
	if err := p.d.rt.Delete(context.WithoutCancel(ctx), c.id); err != nil {
		log.Warn("delete prepared container; the next agent start retries", "err", err)
		return
	}
	p.d.removeJobDir(log, c.id)
	if err := p.d.ckpt.RemoveSlot(c.id); err != nil {
		log.Warn("remove checkpoint slot of prepared container", "err", err)
	}
}

// take removes and returns a prepared container of shape for job, or
// nil: the one prepared for the job if any, else the newest of the shape
// (they are alike: the same user, devices, limits and mounts).
func (p *preparedPool) take(shape string, job spec.JobID) *preparedCtr {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.byShape[shape]
	if len(cs) == 0 {
		return nil
	}
	i := len(cs) - 1
	if k := slices.IndexFunc(cs, func(c *preparedCtr) bool { return c.forJob == job }); k >= 0 {
		i = k
	}
	c := cs[i]
	cs = slices.Delete(cs, i, i+1)
	if len(cs) == 0 {
		delete(p.byShape, shape)
	} else {
		p.byShape[shape] = cs
	}
	p.total--
	if x := p.expected[c.forJob]; x.holds(c) {
		x.ctr = nil // another job took it: the next list prepares another
	}
	return c
}

// refill prepares containers of tmpl's shape (built with the shape's
// placeholder directories) in the background until the shape has
// perShape of them or the node max.
func (p *preparedPool) refill(ctx context.Context, tmpl runtime.TaskConfig, shape string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && p.countLearned(shape)+p.making[shape] < p.perShape && p.total < p.max {
		p.launchLocked(ctx, tmpl, shape, nil)
	}
}

// countLearned counts shape's prepared containers that no expected job
// holds.
func (p *preparedPool) countLearned(shape string) int {
	n := 0
	for _, c := range p.byShape[shape] {
		if c.forJob == 0 {
			n++
		}
	}
	return n
}

// launchLocked starts the preparation of one container of tmpl's shape in
// the background: for expectation x, or (nil) for the next job of the
// shape. p.mu is held.
func (p *preparedPool) launchLocked(ctx context.Context, tmpl runtime.TaskConfig, shape string, x *expectation) {
	p.making[shape]++
	p.total++
	p.seq++
	id := ContainerID(0, p.seq, p.d.cfg.Name)
	id = preparedPrefix + strings.TrimPrefix(id, "gpud-0-")
	if x != nil {
		x.making, x.made = true, make(chan struct{})
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var forJob spec.JobID
		if x != nil {
			forJob = x.job
		}
		c, err := p.prepare(ctx, tmpl, shape, id, forJob)
		p.mu.Lock()
		p.making[shape]--
		if p.making[shape] == 0 {
			delete(p.making, shape)
		}
		why := "agent stopping"
		if x != nil {
			x.making = false
			defer close(x.made) // after p.mu is released, with x.ctr set
			if !p.closed && p.expected[x.job] != x {
				why = "expectation withdrawn while it was prepared"
			}
		}
		keep := err == nil && !p.closed && (x == nil || p.expected[x.job] == x)
		if keep {
			p.byShape[shape] = append(p.byShape[shape], c)
			if x != nil {
				x.ctr = c
			}
		} else {
			p.total--
		}
		p.mu.Unlock()
		switch {
		case err != nil:
			p.d.log.Debug("prepare container", "container", id, "err", err)
		case !keep:
			p.destroy(ctx, c, why)
		default:
			// Only now can a start take it (the e2e tests wait for this
			// line: its record and task exist a while before).
			p.d.log.Debug("prepared container", "container", id, "uid", tmpl.UID, "image", tmpl.Image, "for_job", forJob)
		}
	}()
}

// prepare makes one prepared container of tmpl's shape under id, for
// expected job forJob (0: none).
func (p *preparedPool) prepare(ctx context.Context, tmpl runtime.TaskConfig, shape, id string, forJob spec.JobID) (c *preparedCtr, err error) {
	log := p.d.log.With("container", id)
	dir := filepath.Join(p.d.cfg.jobsDir(), id)
	defer func() {
		if err != nil {
			p.d.removeJobDir(log, id)
			if rerr := p.d.ckpt.RemoveSlot(id); rerr != nil {
				log.Warn("remove checkpoint slot of prepared container", "err", rerr)
			}
		}
	}()
	jobs, done, err := p.d.openJobs()
	if err != nil {
		return nil, err
	}
	err = makeJobDir(jobs, id, nil, int(tmpl.UID), int(tmpl.GID))
	done()
	if err != nil {
		return nil, err
	}
	owner := -1
	if os.Geteuid() == 0 {
		owner = int(tmpl.UID)
	}
	ckpt, err := p.d.ckpt.PrepareSlot(id, owner, int(tmpl.GID))
	if err != nil {
		return nil, err
	}
	cfg := tmpl
	cfg.ID = id
	cfg.Mounts = rebase(tmpl.Mounts, shapeJobDir, dir, shapeCkptDir, ckpt)
	mark := "1"
	if forJob != 0 {
		mark = strconv.FormatUint(uint64(forJob), 10)
	}
	cfg.Labels = map[string]string{LabelNode: p.d.cfg.Name, LabelPrepared: mark, LabelUser: tmpl.Labels[LabelUser]}
	cfg.Args = []string{runtime.ShellPath, filepath.Join(dir, "launch")}
	cfg.Env = nil
	cfg.StdoutPath, cfg.StderrPath, cfg.TruncateOutput = "", "", false
	binds := bindIDs(cfg.Mounts) // before runc binds them: a change meanwhile reads as stale
	err = p.prep.Prepare(ctx, cfg)
	if err == nil {
		err = p.sameImage(ctx, cfg.Image, keyDigest(shape))
	}
	if err != nil {
		if derr := p.d.rt.Delete(context.WithoutCancel(ctx), id); derr != nil {
			log.Warn("delete container after failed prepare", "err", derr)
		}
		return nil, err
	}
	return &preparedCtr{id: id, shape: shape, made: p.d.clock.Now(), dir: dir, ckpt: ckpt, binds: binds, forJob: forJob}, nil
}

// sameImage checks that the node's cache holds ref at digest (after a
// container was made from it): a pull of a moved tag meanwhile made it
// from other content than its shape says.
func (p *preparedPool) sameImage(ctx context.Context, ref, digest string) error {
	if digest == "" {
		return nil
	}
	puller, ok := p.d.rt.(runtime.ImagePuller)
	if !ok {
		return nil
	}
	imgs, err := puller.CachedImages(ctx)
	if err != nil {
		return err
	}
	for _, im := range imgs {
		if im.Ref == ref && im.Digest == digest {
			return nil
		}
	}
	return fmt.Errorf("image %s no longer at %s in the cache", ref, digest)
}

// prepared reports how many prepared containers wait.
func (p *preparedPool) prepared() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cs := range p.byShape {
		n += len(cs)
	}
	return n
}

// startPrepared starts the job in a prepared container of its shape when
// the pool has one (started), and asks the pool for the next; otherwise
// (or when that start fails, which leaves nothing behind) the caller
// starts it cold. refill, when not nil, asks for the containers of the
// job's shape: the caller calls it once the job runs.
func (r *runner) startPrepared(ctx context.Context, log *slog.Logger) (started bool, refill func()) {
	if r.d.pool == nil {
		return false, nil
	}
	return r.startPreparedIn(ctx, log, r.d.pool)
}

// startPreparedIn is startPrepared with a pool. Apart, so that a node
// without a pool does not grow each runner's stack for this one's frame
// (a job's taskInput and container config, a few KiB).
func (r *runner) startPreparedIn(ctx context.Context, log *slog.Logger, pool *preparedPool) (started bool, refill func()) {
	pool.noteStarted(r.jobID) // expect.go: prepare nothing more for it
	in, err := r.taskInput(shapeJobDir, shapeCkptDir, "")
	if err != nil {
		return false, nil
	}
	if _, err := os.Lstat(r.d.ckpt.JobDir(r.jobID)); !errors.Is(err, fs.ErrNotExist) {
		return false, nil // a checkpoint directory already: it may restart from it
	}
	tmpl, err := buildTask(&in)
	if err != nil || !poolable(&in, tmpl) {
		return false, nil
	}
	shape := shapeKey(tmpl, "", "", r.pulled.Digest)
	refill = func() { pool.refill(context.WithoutCancel(ctx), tmpl, shape) }
	c := pool.take(shape, r.jobID)
	if c == nil && pool.awaitMade(ctx, r.jobID, shape) {
		c = pool.take(shape, r.jobID) // the one being prepared for it
	}
	if c == nil {
		return false, refill
	}
	clog := log.With("prepared", c.id)
	if err := r.claim(ctx, c, shape); err != nil {
		clog.Warn("start in a prepared container failed; starting the job in a new one", "err", err)
		if derr := r.d.rt.Delete(context.WithoutCancel(ctx), c.id); derr != nil {
			clog.Warn("delete prepared container", "err", derr)
		}
		r.d.removeJobDir(clog, c.id)
		if err := r.d.ckpt.RemoveSlot(c.id); err != nil {
			clog.Warn("remove checkpoint slot of prepared container", "err", err)
		}
		return false, refill
	}
	return true, refill
}

// claim starts the job in prepared container c (of the job's shape).
func (r *runner) claim(ctx context.Context, c *preparedCtr, shape string) error {
	job := &r.asg.Job
	in, err := r.taskInput(c.dir, c.ckpt, "")
	if err != nil {
		return err
	}
	in.ContainerID = c.id
	cfg, err := buildTask(&in)
	if err != nil {
		return err
	}
	cfg.Labels[LabelPrepared] = "" // removed: the container is the job's now
	if got := shapeKey(cfg, c.dir, c.ckpt, r.pulled.Digest); got != shape {
		return fmt.Errorf("prepared container %s does not fit the job: it was made for %s, the job needs %s", c.id,
			strings.ReplaceAll(shape, "\x00", " image digest "), strings.ReplaceAll(got, "\x00", " image digest "))
	}
	if p := c.stale(); p != "" {
		return fmt.Errorf("prepared container %s binds an earlier %s (removed or replaced since)", c.id, p)
	}
	jobs, err := safefs.OpenDir(r.d.cfg.jobsDir())
	if err != nil {
		return fmt.Errorf("open job directories: %w", err)
	}
	defer jobs.Close()
	d, err := jobs.OpenDir(c.id)
	if err != nil {
		return fmt.Errorf("open job directory: %w", err)
	}
	defer d.Close()
	owner := -1
	if os.Geteuid() == 0 {
		owner = int(job.UID)
	}
	if err := d.WriteFile("script", []byte(job.Script), 0o700, owner, int(job.GID)); err != nil {
		return fmt.Errorf("write job script: %w", err)
	}
	if err := d.WriteFile("launch", launcher(cfg), 0o500, owner, int(job.GID)); err != nil {
		return fmt.Errorf("write job launcher: %w", err)
	}
	if err := r.adoptCheckpointSlot(c.id); err != nil {
		return err
	}
	r.id = c.id
	stopServe := r.serveSteps(ctx, cfg.Env)
	if err := r.d.pool.prep.StartPrepared(ctx, c.id, cfg); err != nil {
		stopServe()
		r.id = ContainerID(r.asg.Job.ID, r.asg.Alloc.Attempt, r.d.cfg.Name)
		return err
	}
	r.steps.Started()
	r.outputReady.Store(true)
	r.log().Info("job container started", "prepared", true, "image", cfg.Image, "uid", cfg.UID, "gpus", r.self.GPUs)
	return nil
}

// removePreparedLeftovers deletes the prepared containers and checkpoint
// slots an earlier agent of this node left (it crashed): they were never
// claimed, or recovery would have found them relabelled.
func (a *Agent) removePreparedLeftovers(ctx context.Context, infos []runtime.TaskInfo) {
	for _, ti := range infos {
		if ti.Labels[LabelNode] != a.cfg.Name || ti.Labels[LabelPrepared] == "" {
			continue
		}
		log := a.log.With("container", ti.ID)
		log.Info("removing a prepared container an earlier agent left")
		if err := a.rt.Delete(ctx, ti.ID); err != nil {
			log.Warn("delete prepared container; the next agent start retries", "err", err)
		}
	}
	// The slots of those, and of preparations cut short before their
	// container was made: this node's names only (a standalone's nodes
	// share the checkpoint root).
	ents, err := os.ReadDir(a.ckpt.Root())
	if err != nil {
		return
	}
	mine := "-" + strings.TrimPrefix(ContainerID(0, 0, a.cfg.Name), "gpud-0-0-")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), preparedPrefix) && strings.HasSuffix(e.Name(), mine) {
			if err := a.ckpt.RemoveSlot(e.Name()); err != nil {
				a.log.Warn("remove checkpoint slot of a prepared container", "slot", e.Name(), "err", err)
			}
		}
	}
}
