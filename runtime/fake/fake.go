package fake

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/runtime"
)

// Script says how one container behaves. The zero Script starts, runs until
// Exit is called or a terminating signal arrives, and exits by that signal.
type Script struct {
	// StartErr makes Start fail with this error; no container is created,
	// as when containerd cannot find the image.
	StartErr error
	// ExitAtOnce ends the task as soon as it starts, with Exit.
	ExitAtOnce bool
	// Exit is the status for ExitAtOnce and the default for Runtime.Exit
	// calls that pass a zero status. OOMKilled here models an OOM kill.
	Exit runtime.ExitStatus
	// IgnoreSIGTERM makes the task survive SIGTERM (a job without a
	// handler running as PID 1, or one that ignores it), so only SIGKILL
	// ends it.
	IgnoreSIGTERM bool
	// HangOnStop makes the task survive every signal, SIGKILL included (a
	// process stuck in uninterruptible sleep), and makes Delete of the
	// running task block until ctx ends or a test calls Exit.
	HangOnStop bool
}

// Signalled is one signal delivery the fake recorded.
type Signalled struct {
	ID  string
	Sig syscall.Signal
}

type task struct {
	cfg    runtime.TaskConfig
	script Script
	status runtime.TaskStatus
	exit   runtime.ExitStatus
	done   chan struct{} // closed when the task exits
}

// Runtime is the scripted fake. The zero value is not usable; call New.
type Runtime struct {
	mu       sync.Mutex
	now      func() time.Time
	def      Script
	scripts  map[string]Script
	tasks    map[string]*task
	starts   []runtime.TaskConfig
	signals  []Signalled
	deletes  []string
	changed  chan struct{} // closed and replaced on every change
	startErr int           // Start calls that failed
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns an empty fake whose ExitedAt times come from time.Now.
func New() *Runtime {
	return &Runtime{
		now:     time.Now,
		scripts: map[string]Script{},
		tasks:   map[string]*task{},
		changed: make(chan struct{}),
	}
}

// SetClock makes ExitedAt times come from now (a test's fake clock).
func (r *Runtime) SetClock(now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}

// SetDefault sets the script of every ID that has no script of its own.
func (r *Runtime) SetDefault(s Script) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.def = s
}

// SetScript sets the script for container id; it applies to the next Start.
func (r *Runtime) SetScript(id string, s Script) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scripts[id] = s
}

// Changed returns a channel closed at the next change of the fake's state
// (start, signal, exit, delete), so tests can wait for a condition without
// sleeping: check it, and if false wait on Changed (taken before checking).
func (r *Runtime) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// changedLocked wakes everyone waiting on Changed. r.mu must be held.
func (r *Runtime) changedLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Runtime) scriptLocked(id string) Script {
	if s, ok := r.scripts[id]; ok {
		return s
	}
	return r.def
}

// exitLocked ends t with st unless it already ended. r.mu must be held.
func (r *Runtime) exitLocked(t *task, st runtime.ExitStatus) {
	if t.status == runtime.StatusExited {
		return
	}
	if st.ExitedAt.IsZero() {
		st.ExitedAt = r.now()
	}
	t.status = runtime.StatusExited
	t.exit = st
	close(t.done)
	r.changedLocked()
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, cfg runtime.TaskConfig) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cfg.ID == "" {
		return fmt.Errorf("start container: empty ID")
	}
	if _, ok := r.tasks[cfg.ID]; ok {
		return fmt.Errorf("start container %s: %w", cfg.ID, os.ErrExist)
	}
	s := r.scriptLocked(cfg.ID)
	if s.StartErr != nil {
		r.startErr++
		r.changedLocked()
		return fmt.Errorf("start container %s: %w", cfg.ID, s.StartErr)
	}
	t := &task{cfg: copyConfig(cfg), script: s, status: runtime.StatusRunning, done: make(chan struct{})}
	r.tasks[cfg.ID] = t
	r.starts = append(r.starts, copyConfig(cfg))
	r.changedLocked()
	if s.ExitAtOnce {
		r.exitLocked(t, s.Exit)
	}
	return nil
}

// Wait implements runtime.Runtime.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	r.mu.Lock()
	t, ok := r.tasks[id]
	created := ok && t.status == runtime.StatusCreated
	r.mu.Unlock()
	if !ok {
		return runtime.ExitStatus{}, fmt.Errorf("wait for container %s: %w", id, runtime.ErrNotFound)
	}
	if created {
		// A created task never started: real containerd would block
		// until someone starts it; no test needs that, so say so.
		return runtime.ExitStatus{}, fmt.Errorf("wait for container %s: task was never started", id)
	}
	select {
	case <-t.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return t.exit, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}

// Signal implements runtime.Runtime. SIGKILL ends the task, SIGTERM ends it
// unless the script ignores it, other signals are only recorded. Signalling
// an exited task is recorded and not an error.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return fmt.Errorf("signal container %s: %w", id, runtime.ErrNotFound)
	}
	r.signals = append(r.signals, Signalled{ID: id, Sig: sig})
	r.changedLocked()
	r.deliverLocked(t, sig)
	return nil
}

func (r *Runtime) deliverLocked(t *task, sig syscall.Signal) {
	if t.status != runtime.StatusRunning || t.script.HangOnStop {
		return
	}
	switch {
	case sig == syscall.SIGKILL, sig == syscall.SIGTERM && !t.script.IgnoreSIGTERM:
		r.exitLocked(t, runtime.ExitStatus{Code: 128 + int(sig), Signal: sig})
	}
}

// Delete implements runtime.Runtime.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	t, ok := r.tasks[id]
	if !ok {
		r.mu.Unlock()
		return nil
	}
	if t.status == runtime.StatusRunning {
		r.signals = append(r.signals, Signalled{ID: id, Sig: syscall.SIGKILL})
		r.deliverLocked(t, syscall.SIGKILL)
		r.changedLocked()
	}
	created := t.status == runtime.StatusCreated
	r.mu.Unlock()
	if !created {
		select {
		case <-t.done:
		case <-ctx.Done():
			return fmt.Errorf("delete container %s: %w", id, ctx.Err())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tasks[id] == t {
		delete(r.tasks, id)
		r.deletes = append(r.deletes, id)
		r.changedLocked()
	}
	return nil
}

// List implements runtime.Runtime; containers come sorted by ID.
func (r *Runtime) List(ctx context.Context) ([]runtime.TaskInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.TaskInfo, 0, len(r.tasks))
	for id, t := range r.tasks {
		ti := runtime.TaskInfo{ID: id, Labels: maps.Clone(t.cfg.Labels), Status: t.status}
		if t.status == runtime.StatusExited {
			e := t.exit
			ti.Exit = &e
		}
		out = append(out, ti)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Exit ends the running task id with st (the script's Exit when st is the
// zero value), as if the job's process exited by itself. It also releases a
// HangOnStop task. It reports whether a running task was ended.
func (r *Runtime) Exit(id string, st runtime.ExitStatus) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok || t.status != runtime.StatusRunning {
		return false
	}
	if st == (runtime.ExitStatus{}) {
		st = t.script.Exit
	}
	r.exitLocked(t, st)
	return true
}

// Add plants a container as an earlier agent process would have left it:
// status StatusRunning (it keeps running until Exit or a signal),
// StatusExited with exit, or StatusCreated. It does not count as a Start.
func (r *Runtime) Add(cfg runtime.TaskConfig, status runtime.TaskStatus, exit runtime.ExitStatus) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tasks[cfg.ID]; ok {
		return fmt.Errorf("add container %s: %w", cfg.ID, os.ErrExist)
	}
	t := &task{cfg: copyConfig(cfg), script: r.scriptLocked(cfg.ID), status: status, done: make(chan struct{})}
	if status == runtime.StatusExited {
		if exit.ExitedAt.IsZero() {
			exit.ExitedAt = r.now()
		}
		t.exit = exit
		close(t.done)
	}
	r.tasks[cfg.ID] = t
	r.changedLocked()
	return nil
}

// Starts returns the config of every successful Start, in order.
func (r *Runtime) Starts() []runtime.TaskConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.TaskConfig, len(r.starts))
	for i, c := range r.starts {
		out[i] = copyConfig(c)
	}
	return out
}

// StartErrors counts Start calls that failed by script.
func (r *Runtime) StartErrors() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.startErr
}

// Config returns the config container id was started (or added) with.
func (r *Runtime) Config(id string) (runtime.TaskConfig, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return runtime.TaskConfig{}, false
	}
	return copyConfig(t.cfg), true
}

// Status returns the status of container id, and false if it does not exist.
func (r *Runtime) Status(id string) (runtime.TaskStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return "", false
	}
	return t.status, true
}

// Signals returns the signals delivered to id, in order (Delete's kill of
// a running task included).
func (r *Runtime) Signals(id string) []syscall.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []syscall.Signal
	for _, s := range r.signals {
		if s.ID == id {
			out = append(out, s.Sig)
		}
	}
	return out
}

// Deletes returns the IDs of deleted containers, in order.
func (r *Runtime) Deletes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.deletes)
}

func copyConfig(c runtime.TaskConfig) runtime.TaskConfig {
	c.Labels = maps.Clone(c.Labels)
	c.Args = slices.Clone(c.Args)
	c.Env = slices.Clone(c.Env)
	c.AdditionalGIDs = slices.Clone(c.AdditionalGIDs)
	c.Mounts = slices.Clone(c.Mounts)
	c.CDIDevices = slices.Clone(c.CDIDevices)
	return c
}
