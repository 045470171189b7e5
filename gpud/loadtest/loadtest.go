package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/process"
	"github.com/gpud/gpud/gpud/sim/trace"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

// Options say what fleet and workload to run.
type Options struct {
	Nodes, GPUsPerNode, Jobs, Submitters, JobGPUs int
	JobDuration                                   time.Duration
	Trace                                         string
	TraceSpeed                                    float64
	// Rate paces the burst: job i is due i/Rate seconds into the workload
	// (open loop), sent by the first free submitter; 0 sends each as soon
	// as a submitter is free (closed loop: the rate is what --submitters
	// clients get answered at). A paced job's submit→ack and submit→start
	// count from when it was due, so a harness behind schedule shows as
	// latency rather than as a slower offered rate (coordinated omission).
	Rate                                        float64
	Hold, Heartbeat, NodeTimeout, UsageInterval time.Duration
	SchedInterval                               time.Duration
	MaxJobsPerCycle, Procs, AgentsGOGC          int
	// AgentsNice runs the agents children this much nicer than the
	// controller (nice(1)): on a machine the harness shares with the
	// controller, the controller's CPU comes first, as on a host of its
	// own. The agents' part of each latency still counts.
	AgentsNice                  int
	Ramp, Timeout               time.Duration
	Dir, AgentDir, Gpud, Plot   string
	CtlProfile                  string // the controller's CPU profile (pprof)
	AgentsProfile               string // each agents child's CPU profile, .N added (pprof)
	Keep, MemoryOutbox, Preload bool
	Log                         *slog.Logger
	Out                         io.Writer
	// Version is gpud's, registered with each simulated node.
	Version string
}

func (o *Options) check() error {
	if o.Nodes < 1 || o.Nodes > 60000 {
		return spec.Errorf(spec.ErrInvalid, "--nodes %d: give 1 to 60000", o.Nodes)
	}
	if o.GPUsPerNode < 1 || o.JobGPUs < 1 || o.JobGPUs > o.GPUsPerNode {
		return spec.Errorf(spec.ErrInvalid, "--gpus-per-node %d, --job-gpus %d: both at least 1, a job no bigger than a node", o.GPUsPerNode, o.JobGPUs)
	}
	if o.Jobs < 0 || o.Submitters < 1 {
		return spec.Errorf(spec.ErrInvalid, "--jobs %d must not be negative and --submitters %d must be at least 1", o.Jobs, o.Submitters)
	}
	if o.Heartbeat < time.Second {
		return spec.Errorf(spec.ErrInvalid, "--heartbeat %s: at least 1s (the controller counts whole seconds)", o.Heartbeat)
	}
	if o.Procs == 0 {
		o.Procs = 1
	}
	if o.Procs < 1 {
		return spec.Errorf(spec.ErrInvalid, "--procs %d: give at least 1", o.Procs)
	}
	o.Procs = min(o.Procs, o.Nodes)
	if o.AgentsGOGC < 0 {
		return spec.Errorf(spec.ErrInvalid, "--agents-gogc %d: give a percentage, or 0 for Go's default", o.AgentsGOGC)
	}
	if o.AgentsNice < 0 || o.AgentsNice > 19 || o.AgentsNice > 0 && o.Procs < 2 {
		return spec.Errorf(spec.ErrInvalid, "--agents-nice %d: give 0 to 19, with --procs 2 or more (the agents in their own processes)", o.AgentsNice)
	}
	if o.AgentsProfile != "" && o.Procs < 2 {
		return spec.Errorf(spec.ErrInvalid, "--agents-cpuprofile is for the children of --procs 2 or more; with one process use --cpuprofile")
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 3 * o.Heartbeat
	}
	if ext := strings.ToLower(filepath.Ext(o.Plot)); o.Plot != "" && ext != ".svg" && ext != ".png" {
		return spec.Errorf(spec.ErrInvalid, "--plot %q: name a .svg or .png file", o.Plot)
	}
	if o.Rate < 0 || o.Rate > 0 && o.Trace != "" {
		return spec.Errorf(spec.ErrInvalid, "--rate %g: give submissions per second for the burst (not with --trace, whose arrivals pace it), or 0 for as fast as answered", o.Rate)
	}
	if o.Trace != "" && o.TraceSpeed <= 0 {
		return spec.Errorf(spec.ErrInvalid, "--trace-speed %g must be positive", o.TraceSpeed)
	}
	return nil
}

// ltJob is one job of the workload as the harness sees it.
type ltJob struct {
	sentAt, ackAt time.Time // submission request sent, acknowledged
	startAt       time.Time // the fake runtime started its container
	// placeAt is the allocation's start as the agent got it (the
	// controller's placement, moved to the agent's clock by the answer's
	// own delay: see node's localStarts); recvAt is when the agent's last
	// assignments answer before the start arrived. Both zero if unknown.
	placeAt, recvAt time.Time
	starts          int // container starts (more than 1: requeued)
}

// ltAlloc is one allocation's end as the harness sees it.
type ltAlloc struct {
	exitAt, freeAt time.Time // container exited; controller acknowledged the exit
}

// loadtest is one run's shared state; the agents' runtimes and meters
// report into it.
type loadtest struct {
	o          Options
	t0         time.Time
	mu         sync.Mutex
	jobs       map[spec.JobID]*ltJob
	allocs     map[string]*ltAlloc
	unknown    []string // starts of jobs no submitter was acknowledged (yet)
	acked      atomic.Int64
	started    atomic.Int64
	exited     atomic.Int64
	freed      atomic.Int64
	heartbeats atomic.Int64
	hbErrors   atomic.Int64
	usage      atomic.Int64
	submitErrs atomic.Int64
	rejected   atomic.Int64 // 429s and other refused submissions (retried)
	children   *ltChildren  // the agents' processes with --procs
	// longest is the workload's longest job: no exit for that long is no stall.
	longest time.Duration
}

func (lt *loadtest) job(id spec.JobID) *ltJob {
	j := lt.jobs[id]
	if j == nil {
		j = &ltJob{}
		lt.jobs[id] = j
	}
	return j
}

// Run runs the whole thing and returns its report: `gpud controller` as
// a child process (o.Gpud) on a loopback TLS port with its own state dir,
// o.Nodes real node agents (gpud/node) with fake runtimes, in this process
// or in o.Procs children (o.Gpud loadtest --agents-child), each dialling
// from its own loopback address as a separate host would, and the
// workload's submitters.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	process.RaiseOpenFiles(o.Log, "loadtest (the controller child inherits it)")
	var err error
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "gpud-loadtest-"); err != nil {
			return nil, err
		}
		if !o.Keep {
			defer os.RemoveAll(o.Dir)
		}
	} else if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if o.AgentDir == "" {
		base := "/dev/shm"
		if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
			base = ""
		}
		if o.AgentDir, err = os.MkdirTemp(base, "gpud-loadtest-agents-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(o.AgentDir)
	}
	if o.Gpud == "" {
		if o.Gpud, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the gpud binary for the controller: %w; pass --gpud", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	ctl, err := startLoadtestController(ctx, o)
	if err != nil {
		return nil, err
	}
	defer ctl.stop()
	lt := &loadtest{o: o, jobs: map[spec.JobID]*ltJob{}, allocs: map[string]*ltAlloc{}}
	keys, err := auth.LoadKeys(ctl.cfg.TokenKeyPath(), ctl.cfg.Auth.ClusterName)
	if err != nil {
		return nil, fmt.Errorf("load the controller's token key: %w", err)
	}
	userTok, err := keys.Issue(auth.Claims{User: "loadtest", UID: 60000, GID: 60000}, 24*time.Hour)
	if err != nil {
		return nil, err
	}

	// The fleet: in this process, or in o.Procs children.
	agentCtx, stopAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	defer func() { stopAgents(); agents.Wait() }()
	lt.t0 = time.Now()
	rssBare := procStat(ctl.cmd.Process.Pid).rss
	fmt.Fprintf(o.Out, "loadtest: controller pid %d on %s; starting %d agents × %d GPUs in %d process(es) (state in %s)\n",
		ctl.cmd.Process.Pid, ctl.addr, o.Nodes, o.GPUsPerNode, o.Procs, o.AgentDir)
	fc := ltFleet{Addr: ctl.addr, CA: ctl.ca, KeyPath: ctl.cfg.TokenKeyPath(), Cluster: ctl.cfg.Auth.ClusterName,
		GPUsPerNode: o.GPUsPerNode, Heartbeat: o.Heartbeat, UsageInterval: o.UsageInterval, Ramp: o.Ramp,
		MemoryOutbox: o.MemoryOutbox, AgentDir: o.AgentDir, Log: filepath.Join(o.Dir, "agents.log"), Version: o.Version}
	if o.Procs > 1 {
		kids, err := lt.startChildren(o, fc)
		if err != nil {
			return nil, err
		}
		lt.children = kids
		agents.Add(1)
		go func() {
			defer agents.Done()
			<-agentCtx.Done()
			kids.stop()
		}()
	} else {
		fc.To = o.Nodes
		closeLog, err := fc.start(agentCtx, &agents, lt, o.Log)
		if err != nil {
			return nil, err
		}
		defer closeLog()
	}
	user, err := lt.client(ctl, userTok, net.IPv4(127, 11, 0, 1), false)
	if err != nil {
		return nil, err
	}
	if err := waitNodesIdle(ctx, user, o.Nodes); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "loadtest: %d nodes registered and idle after %s\n", o.Nodes, time.Since(lt.t0).Round(time.Millisecond))
	goroutines := lt.harnessGoroutines()
	all, _ := lt.harnessStat()
	harnessIdle := all.rss

	// The node requests the controller answered before the workload: the
	// report counts those of the workload per start.
	reqsBefore, reqsErr := readNodeRequests(ctx, user, ctl.addr)
	// The workload, sampled once a second.
	samp := newSampler(lt, ctl)
	sampCtx, stopSamp := context.WithCancel(ctx)
	sampDone := make(chan struct{})
	go func() { defer close(sampDone); samp.run(sampCtx) }()
	wl := time.Now()
	total, err := lt.submitAll(ctx, ctl, userTok)
	subDone := time.Now()
	opened := wl
	if err == nil && o.Preload {
		fmt.Fprintf(o.Out, "loadtest: %d jobs queued in %s (%.0f/s); bringing the partition UP\n", total, subDone.Sub(wl).Round(time.Millisecond), float64(total)/subDone.Sub(wl).Seconds())
		err = ctl.openPartition()
		opened = time.Now()
	}
	if err == nil {
		err = lt.waitEnded(ctx, user, total)
	}
	drained := time.Now()
	if err == nil && o.Hold > 0 {
		fmt.Fprintf(o.Out, "loadtest: holding the fleet for %s\n", o.Hold)
		if !ltSleep(ctx, o.Hold) {
			err = ctx.Err()
		}
	}
	stopSamp()
	<-sampDone
	var reqsAfter nodeRequests
	if reqsErr == nil {
		reqsAfter, reqsErr = readNodeRequests(ctx, user, ctl.addr)
	}
	rep := lt.report(samp, wl, opened, subDone, drained)
	if reqsErr != nil {
		fmt.Fprintf(o.Out, "loadtest: node requests per start not counted: %v\n", reqsErr)
	} else if total > 0 {
		rep.AssignmentsPerStart = (reqsAfter.assignments - reqsBefore.assignments) / float64(total)
		rep.EventsPerStart = (reqsAfter.events - reqsBefore.events) / float64(total)
	}
	rep.RSSBare = rssBare
	rep.HarnessGoroutines, rep.HarnessRSSIdle = goroutines, harnessIdle
	// A stalled drain (a job that ended otherwise than by its exit, such
	// as NODE_FAIL) still gets its accounting checked and reported.
	var stalled *ltStall
	if errors.As(err, &stalled) {
		fmt.Fprintf(o.Out, "loadtest: %v\n", err)
		err = nil
	}
	if err != nil {
		return rep, err
	}
	downs, err := nodesNotIdle(ctx, user)
	if err != nil {
		return rep, err
	}
	rep.NotUp = downs
	if err := lt.checkAccounting(ctx, user, rep); err != nil {
		return rep, err
	}
	stopAgents()
	agents.Wait()
	ctl.stop()
	rep.StateDB, rep.AcctDB = dbSize(filepath.Join(ctl.cfg.Controller.StateDir, "state.db")), dbSize(ctl.cfg.AccountingPath())
	if o.Plot != "" {
		if err := samp.plot(o.Plot); err != nil {
			return rep, err
		}
	}
	if stalled != nil && len(rep.Lost) == 0 {
		return rep, stalled
	}
	return rep, nil
}

// hostAddr is simulated node i's own loopback address, 127.10.x.y: each
// node dials from its own address like a separate host, so per-address
// limits of the API see one host per node, as in a real cluster.
func hostAddr(i int) net.IP { return net.IPv4(127, 10+byte(i/62500), byte(i/250%250), byte(i%250+1)) }

// client returns an https client of the controller with token, dialling
// from src.
func (lt *loadtest) client(ctl *ltController, tok string, src net.IP, meter bool) (*api.Client, error) {
	var sink ltSink
	if meter {
		sink = lt
	}
	return ltClient(ctl.addr, ctl.ca, tok, src, sink, nil)
}

// ltClient returns an https client of the controller at addr, dialling
// from src; with a sink, a node client's calls are metered (heartbeats,
// event acks, and into answers, when set, its assignments answers' times).
func ltClient(addr, ca, tok string, src net.IP, sink ltSink, answers *atomic.Int64) (*api.Client, error) {
	// 10,000 agents share this process and its starved CPU: the
	// handshake and ping bounds a real agent uses (3 s, 5 s + 5 s) would
	// close live connections here (docs/fleet.md), so the harness keeps
	// the earlier, longer ones.
	cl, err := api.NewClientWith("https://"+addr, api.ClientOptions{CAFile: ca, Token: tok,
		HandshakeTimeout: 10 * time.Second, PingAfter: 30 * time.Second, PingTimeout: 15 * time.Second})
	if err != nil {
		return nil, err
	}
	hc := cl.HTTPClient()
	tr, ok := hc.Transport.(*http.Transport)
	if !ok {
		return nil, errors.New("loadtest: the API client's transport is not an *http.Transport")
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr.DialContext = d.DialContext
	if sink != nil {
		hc.Transport = &meterRT{base: tr, sink: sink, answers: answers}
	}
	return cl, nil
}

// ltSink takes what the agents see: the run's own state (agents in this
// process) or a child's report to its parent (--procs).
type ltSink interface {
	// noteStarted: a container of job id started for allocation alloc at
	// at; placed and recv are the job's ltJob.placeAt and recvAt.
	noteStarted(id spec.JobID, alloc string, at, placed, recv time.Time)
	// noteExited: the container of alloc exited (counted: its runtime took
	// the exit).
	noteExited(alloc string, at time.Time, counted bool)
	// noteAcked: the controller acknowledged usage samples and the exits of
	// allocs.
	noteAcked(usage int, allocs []string, at time.Time)
	// noteHeartbeat: one heartbeat answered (ok) or failed.
	noteHeartbeat(ok bool)
}

func (lt *loadtest) noteStarted(id spec.JobID, alloc string, at, placed, recv time.Time) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	j := lt.job(id) // a job may start before its submitter hears the ack
	if j.starts == 0 {
		j.startAt, j.placeAt, j.recvAt = at, placed, recv
		lt.started.Add(1)
	}
	j.starts++
	lt.allocs[alloc] = &ltAlloc{}
}

func (lt *loadtest) noteExited(alloc string, at time.Time, counted bool) {
	lt.mu.Lock()
	if a := lt.allocs[alloc]; a != nil {
		a.exitAt = at
	}
	lt.mu.Unlock()
	if counted {
		lt.exited.Add(1)
	}
}

func (lt *loadtest) noteAcked(usage int, allocs []string, at time.Time) {
	lt.usage.Add(int64(usage))
	if len(allocs) == 0 {
		return
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	for _, id := range allocs {
		if a := lt.allocs[id]; a != nil && a.freeAt.IsZero() {
			a.freeAt = at
			lt.freed.Add(1)
		}
	}
}

func (lt *loadtest) noteHeartbeat(ok bool) {
	if ok {
		lt.heartbeats.Add(1)
	} else {
		lt.hbErrors.Add(1)
	}
}

// meterRT counts a node agent's calls as the controller acknowledges
// them: heartbeats, usage samples, and exits (the node is free once the
// controller has taken its exit).
type meterRT struct {
	base http.RoundTripper
	sink ltSink
	// answers, when set, is when the node's last assignments answer
	// arrived (Unix ns), for its simRuntime's submit→start stages.
	answers *atomic.Int64
}

func (m *meterRT) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	// The events the controller is asked to acknowledge, decoded by the
	// controller's own hand-written decoder (api.DecodeEventsRequest: one
	// pass, no reflection); a body it does not take (none the agents
	// write) falls back to encoding/json.
	var evs api.EventsRequest
	isEvents := req.Method == http.MethodPost && strings.HasSuffix(path, "/events")
	if isEvents && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			data, err := io.ReadAll(b)
			b.Close()
			if err == nil && !api.DecodeEventsRequest(data, &evs) {
				_ = json.Unmarshal(data, &evs)
			}
		}
	}
	resp, err := m.base.RoundTrip(req)
	ok := err == nil && resp.StatusCode/100 == 2
	switch {
	case m.answers != nil && ok && req.Method == http.MethodGet && strings.HasSuffix(path, "/assignments"):
		// A poll's headers come with the whole answer (one Write); a watch
		// stream's answers come later, a line each, as its body is read:
		// each read that returns bytes is an answer arriving.
		m.answers.Store(time.Now().UnixNano())
		resp.Body = &answerBody{ReadCloser: resp.Body, at: m.answers}
	case req.Method == http.MethodPost && strings.HasSuffix(path, "/heartbeat"):
		m.sink.noteHeartbeat(ok)
	case isEvents && ok:
		usage := 0
		var ended []string
		for _, e := range evs.Events {
			switch e.Kind {
			case api.EventUsage:
				usage++
			case api.EventExited:
				ended = append(ended, e.AllocID)
			}
		}
		m.sink.noteAcked(usage, ended, time.Now())
	}
	return resp, err
}

// answerBody is an assignments answer's body that notes when its bytes
// arrive (meterRT.answers): the watch stream's answers are lines of one
// long body, so the response's headers say when the stream began, not
// when an answer came (the stages placed→answer and answer→running read
// -23 s and +23 s without it).
type answerBody struct {
	io.ReadCloser
	at *atomic.Int64
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.at.Store(time.Now().UnixNano())
	}
	return n, err
}

// simRuntime is a node's fake container runtime whose containers run for
// their job's virtual duration (LOADTEST_RUN_MS in the job's environment)
// and then exit 0.
type simRuntime struct {
	*fake.Runtime
	sink ltSink
	// answers is the node's meterRT.answers (nil: unknown).
	answers *atomic.Int64
}

const envRunMS = "LOADTEST_RUN_MS"

func (r *simRuntime) Start(ctx context.Context, cfg runtime.TaskConfig) error {
	if err := r.Runtime.Start(ctx, cfg); err != nil {
		return err
	}
	now := time.Now()
	var ms int64
	for _, e := range cfg.Env {
		if v, ok := strings.CutPrefix(e, envRunMS+"="); ok {
			ms, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	id, _ := strconv.ParseUint(cfg.Labels[node.LabelJob], 10, 64)
	alloc := cfg.Labels[node.LabelAlloc]
	placed, _ := time.Parse(time.RFC3339Nano, cfg.Labels[node.LabelStart])
	var recv time.Time
	if r.answers != nil {
		if ns := r.answers.Load(); ns > 0 {
			recv = time.Unix(0, ns)
		}
	}
	r.sink.noteStarted(spec.JobID(id), alloc, now, placed, recv)
	time.AfterFunc(time.Duration(ms)*time.Millisecond, func() {
		at := time.Now()
		r.sink.noteExited(alloc, at, r.Exit(cfg.ID, runtime.ExitStatus{}))
	})
	return nil
}

// ltWork is one job to submit: when (offset from the workload's start),
// how many GPUs, for how long.
type ltWork struct {
	at   time.Duration
	gpus int
	run  time.Duration
}

// workload is the burst, or the trace's arrivals sped up.
func (lt *loadtest) workload() ([]ltWork, error) {
	o := lt.o
	if o.Trace == "" {
		w := make([]ltWork, o.Jobs)
		for i := range w {
			w[i] = ltWork{gpus: o.JobGPUs, run: o.JobDuration}
			if o.Rate > 0 {
				w[i].at = time.Duration(float64(i) / o.Rate * float64(time.Second))
			}
		}
		return w, nil
	}
	f, err := trace.Open(o.Trace, trace.FormatAuto)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	jobs, err := trace.ReadAll(f, o.Jobs)
	if err != nil {
		return nil, err
	}
	var w []ltWork
	var first time.Duration = -1
	for _, j := range jobs {
		if first < 0 {
			first = j.Submit
		}
		// One node each: a trace's multi-node jobs become one node's worth.
		g := min(max(j.GPUsPerNode, 1), o.GPUsPerNode)
		w = append(w, ltWork{at: time.Duration(float64(j.Submit-first) / o.TraceSpeed), gpus: g,
			run: time.Duration(float64(j.Runtime) / o.TraceSpeed)})
	}
	slices.SortStableFunc(w, func(a, b ltWork) int { return int(a.at - b.at) })
	return w, nil
}

// submitAll submits the workload from o.Submitters clients and returns how
// many jobs were acknowledged.
func (lt *loadtest) submitAll(ctx context.Context, ctl *ltController, tok string) (int, error) {
	work, err := lt.workload()
	if err != nil {
		return 0, err
	}
	for _, w := range work {
		lt.longest = max(lt.longest, w.run)
	}
	if lt.o.Rate > 0 {
		fmt.Fprintf(lt.o.Out, "loadtest: submitting %d jobs from %d clients at %g/s\n", len(work), lt.o.Submitters, lt.o.Rate)
	} else {
		fmt.Fprintf(lt.o.Out, "loadtest: submitting %d jobs from %d clients\n", len(work), lt.o.Submitters)
	}
	var next atomic.Int64
	start := time.Now()
	errc := make(chan error, lt.o.Submitters)
	for s := range lt.o.Submitters {
		cl, err := lt.client(ctl, tok, net.IPv4(127, 11, 1, byte(s+1)), false)
		if err != nil {
			return 0, err
		}
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(work) {
					errc <- nil
					return
				}
				w := work[i]
				if d := time.Until(start.Add(w.at)); d > 0 && !ltSleep(ctx, d) {
					errc <- ctx.Err()
					return
				}
				due := time.Time{}
				if lt.o.Rate > 0 {
					due = start.Add(w.at)
				}
				if err := lt.submit(ctx, cl, w, due); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for range lt.o.Submitters {
		if e := <-errc; e != nil && err == nil {
			err = e
		}
	}
	return int(lt.acked.Load()), err
}

// submit submits one job, retrying refusals (rate limit, busy) with a
// short pause: the harness measures what the API takes.
// due, when not zero, is when the job was due (--rate): its latencies
// count from then.
func (lt *loadtest) submit(ctx context.Context, cl *api.Client, w ltWork, due time.Time) error {
	js := spec.JobSpec{
		Name:      "lt",
		Script:    "#!/bin/sh\ntrue\n",
		Resources: spec.Resources{Nodes: 1, GPUsPerNode: w.gpus, CPUsPerNode: 1, MemMiB: 1024},
		TimeLimit: spec.Duration(time.Hour),
		Env:       []string{envRunMS + "=" + strconv.FormatInt(w.run.Milliseconds(), 10)},
		WorkDir:   "/tmp",
		SubmitDir: "/tmp",
		Output:    "/dev/null",
	}
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
		if err == nil {
			now := time.Now()
			lt.mu.Lock()
			j := lt.job(resp.ID)
			j.sentAt, j.ackAt = sent, now
			if !due.IsZero() && due.Before(sent) {
				j.sentAt = due
			}
			lt.mu.Unlock()
			lt.acked.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status/100 == 4 && ae.Status != http.StatusTooManyRequests {
			return fmt.Errorf("submit a loadtest job: %w", err)
		}
		lt.rejected.Add(1)
		if attempt > 1000 {
			return fmt.Errorf("submit a loadtest job: still refused after %d tries: %w", attempt, err)
		}
		if !ltSleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// ltStall is waitEnded giving up: no exit acknowledged for a minute more
// than the longest job runs.
type ltStall struct {
	freed           int64
	want            int
	started, exited int64
}

func (e *ltStall) Error() string {
	return fmt.Sprintf("stalled: %d of %d jobs' exits acknowledged, none more for a minute beyond the longest job (started %d, exited %d)",
		e.freed, e.want, e.started, e.exited)
}

// waitEnded waits until n jobs have started, exited and had their exits
// acknowledged, or until the controller has no job of the workload left.
func (lt *loadtest) waitEnded(ctx context.Context, cl *api.Client, n int) error {
	last, lastChange := int64(-1), time.Now()
	lastShown := time.Now()
	for {
		f := lt.freed.Load()
		if time.Since(lastShown) >= 10*time.Second {
			lastShown = time.Now()
			a, st := lt.acked.Load(), lt.started.Load()
			fmt.Fprintf(lt.o.Out, "loadtest: %s: %d acknowledged, %d started, %d queued, %d ended; %d heartbeats\n",
				time.Since(lt.t0).Round(time.Second), a, st, a-st, f, lt.heartbeats.Load())
		}
		if f >= int64(n) {
			return nil
		}
		// A job can end without starting (its node went DOWN between
		// assignment and start): once every started job's exit is
		// acknowledged, ask the controller whether anything is left.
		if f == lt.started.Load() && time.Since(lastChange) > 5*time.Second {
			if left, err := cl.Jobs(ctx, api.JobFilter{Users: []string{"loadtest"}, View: api.ViewBrief}); err == nil && len(left) == 0 {
				return nil
			}
		}
		if f != last {
			last, lastChange = f, time.Now()
		} else if time.Since(lastChange) > time.Minute+lt.longest {
			return &ltStall{freed: f, want: n, started: lt.started.Load(), exited: lt.exited.Load()}
		}
		if !ltSleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("loadtest: %w with %d of %d jobs ended (started %d)", ctx.Err(), f, n, lt.started.Load())
		}
	}
}

// waitNodesIdle waits until n nodes are registered and idle.
func waitNodesIdle(ctx context.Context, cl *api.Client, n int) error {
	for {
		nodes, err := cl.Nodes(ctx)
		idle := 0
		for _, nd := range nodes {
			if nd.State == spec.NodeIdle {
				idle++
			}
		}
		if err == nil && idle >= n {
			return nil
		}
		if !ltSleep(ctx, 500*time.Millisecond) {
			return fmt.Errorf("loadtest: waiting for %d idle nodes (have %d, err %v): %w", n, idle, err, ctx.Err())
		}
	}
}

// nodesNotIdle lists the nodes that are not idle (after the workload all
// should be): a node marked DOWN by mistake shows here.
func nodesNotIdle(ctx context.Context, cl *api.Client) ([]string, error) {
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("loadtest: list nodes at the end: %w", err)
	}
	var out []string
	for _, nd := range nodes {
		if nd.State != spec.NodeIdle {
			out = append(out, nd.Name+"="+string(nd.State))
		}
	}
	return out, nil
}

// checkAccounting checks that every acknowledged job ended exactly once
// in accounting, completed, and that nothing unacknowledged is there.
func (lt *loadtest) checkAccounting(ctx context.Context, cl *api.Client, rep *Report) error {
	lt.mu.Lock()
	want := make(map[spec.JobID]bool, len(lt.jobs))
	for id, j := range lt.jobs {
		if !j.ackAt.IsZero() {
			want[id] = true
		}
		if j.starts != 1 {
			rep.Lost = append(rep.Lost, fmt.Sprintf("job %d started %d times", id, j.starts))
		}
		if j.ackAt.IsZero() {
			rep.Lost = append(rep.Lost, fmt.Sprintf("job %d started but no submission of it was acknowledged", id))
		}
	}
	lt.mu.Unlock()
	var rows []api.AcctJob
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		rows, err = cl.AcctJobs(ctx, api.AcctFilter{Users: []string{"loadtest"}, Limit: len(want) + 1000})
		if err != nil {
			return fmt.Errorf("loadtest: read accounting: %w", err)
		}
		ended := 0
		for _, r := range rows {
			if r.State.Terminal() {
				ended++
			}
		}
		if ended >= len(want) || time.Now().After(deadline) {
			break
		}
		if !ltSleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	seen := map[spec.JobID]int{}
	for _, r := range rows {
		seen[r.ID]++
		switch {
		case !want[r.ID]:
			rep.Lost = append(rep.Lost, fmt.Sprintf("job %d is in accounting but was never acknowledged", r.ID))
		case r.State != spec.StateCompleted:
			rep.Lost = append(rep.Lost, fmt.Sprintf("job %d ended %s (%s), not COMPLETED", r.ID, r.State, r.Reason))
		}
	}
	for id := range want {
		switch seen[id] {
		case 1:
			rep.Accounted++
		case 0:
			rep.Lost = append(rep.Lost, fmt.Sprintf("acknowledged job %d is not in accounting", id))
		default:
			rep.Lost = append(rep.Lost, fmt.Sprintf("job %d is in accounting %d times", id, seen[id]))
		}
	}
	slices.Sort(rep.Lost)
	return nil
}

// ltController is the controller child process.
type ltController struct {
	cmd   *exec.Cmd
	cfg   config.Controller
	path  string // gpud.toml
	toml  string // its text, %s for the partition's state
	addr  string // host:port
	ca    string
	done  chan struct{}
	err   error
	once  sync.Once
	log   *os.File
	start time.Time
}

// startLoadtestController writes gpud.toml into o.Dir and starts
// `gpud controller` on a free loopback port, waiting until it answers.
func startLoadtestController(ctx context.Context, o Options) (*ltController, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	stateDir := filepath.Join(o.Dir, "ctl")
	toml := fmt.Sprintf(`version = 1
[controller]
listen_socket = %q
listen_tcp = %q
state_dir = %q
heartbeat_interval = %q
node_timeout = %q
[scheduler]
interval = %q
max_jobs_per_cycle = %d
[api]
submit_rate = 0
# The simulated nodes authenticate with node tokens, not certificates, so
# their connections would count against max_conns (two per node): exempt
# their addresses (hostAddr), as a site with token nodes does.
conn_limit_exempt = ["127.10.0.0/16"]
[limits]
# One user submits every job (100,000 in the burst): no per-user cap.
max_submit_jobs_per_user = 0
max_submit_size_per_user = "UNLIMITED"
[[partition]]
name = "gpu"
nodes = ["ALL"]
default = true
default_time = "1h"
state = "%%s"
`, filepath.Join(o.Dir, "gpud.sock"), addr, stateDir, o.Heartbeat.String(), o.NodeTimeout.String(),
		o.SchedInterval.String(), o.MaxJobsPerCycle)
	path := filepath.Join(o.Dir, "gpud.toml")
	state := config.PartitionUp
	if o.Preload {
		state = config.PartitionDown
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf(toml, state)), 0o600); err != nil {
		return nil, err
	}
	cfg, err := config.LoadController(path)
	if err != nil {
		return nil, fmt.Errorf("loadtest: the generated controller config: %w", err)
	}
	logf, err := os.Create(filepath.Join(o.Dir, "controller.log"))
	if err != nil {
		return nil, err
	}
	args := []string{"controller", "--config", path, "--log-level", "warn"}
	if o.CtlProfile != "" {
		p, err := filepath.Abs(o.CtlProfile)
		if err != nil {
			return nil, err
		}
		args = append(args, "--cpuprofile", p)
	}
	cmd := exec.Command(o.Gpud, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("loadtest: start %s controller: %w", o.Gpud, err)
	}
	c := &ltController{cmd: cmd, cfg: cfg, addr: addr, path: path, toml: toml, ca: filepath.Join(cfg.TLSDir(), "ca.pem"),
		done: make(chan struct{}), log: logf, start: time.Now()}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	for {
		if _, err := os.Stat(c.ca); err == nil {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				return c, nil
			}
		}
		select {
		case <-c.done:
			logf.Close()
			b, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("loadtest: the controller exited at start-up (%v): %s", c.err, bytes.TrimSpace(b))
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openPartition rewrites gpud.toml with the partition UP and reloads the
// controller (SIGHUP), then waits until the reload has taken.
func (c *ltController) openPartition() error {
	if err := os.WriteFile(c.path, []byte(fmt.Sprintf(c.toml, config.PartitionUp)), 0o600); err != nil {
		return err
	}
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("loadtest: reload the controller: %w", err)
	}
	return nil
}

// stop ends the controller with SIGTERM (SIGKILL after 30s) and waits.
func (c *ltController) stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		c.log.Close()
	})
}

// dbSize is the bytes of a SQLite database with its WAL.
func dbSize(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// procUse is what /proc says a process has used so far.
type procUse struct {
	cpu          float64 // CPU seconds, user and system
	rss, written int64   // resident bytes; bytes written to storage
	// minflt is its minor page faults: most are first touches of memory
	// it grows into, which cost far more in a VM whose freed memory goes
	// back to the host (docs/fleet.md, "Session 21 — the lead").
	minflt int64
	nice   int64 // its niceness (of its first thread)
	read   bool  // its /proc/PID/stat was read (the process lives)
}

func (u procUse) plus(v procUse) procUse {
	return procUse{cpu: u.cpu + v.cpu, rss: u.rss + v.rss, written: u.written + v.written, minflt: u.minflt + v.minflt}
}

// procStat reads a process's use from /proc.
func procStat(pid int) (u procUse) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which may hold spaces.
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 16 {
				u.read = true
				u.minflt, _ = strconv.ParseInt(f[7], 10, 64)
				u.nice, _ = strconv.ParseInt(f[16], 10, 64)
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				u.cpu = (ut + st) / 100 // USER_HZ is 100 on Linux
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				u.rss = kb << 10
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "write_bytes:"); ok {
				u.written, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return u
}

// machineCPU reads the machine's CPU time so far from /proc/stat, in
// clock ticks: all of it, and the part spent idle or waiting for I/O,
// and the part in the kernel (system, interrupts).
func machineCPU() (total, idle, kernel int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, 0
	}
	// user nice system idle iowait irq softirq steal ...
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		total += n
		switch i {
		case 3, 4:
			idle += n
		case 2, 5, 6:
			kernel += n
		}
	}
	return total, idle, kernel
}

// ltSleep waits d or until ctx ends; it reports whether ctx is still live.
func ltSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
