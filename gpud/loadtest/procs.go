package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/process"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/fake"
)

// ltFleet is a range of simulated nodes [From, To) and what their agents
// need: run in this process, or sent as JSON to a child process
// (--procs) on its standard input.
type ltFleet struct {
	From, To      int
	Addr, CA      string // the controller and its CA
	KeyPath       string // the controller's token key: each node's token is issued from it
	Cluster       string
	GPUsPerNode   int
	Heartbeat     time.Duration
	UsageInterval time.Duration
	Ramp          time.Duration // spread the range's start-up over this long
	MemoryOutbox  bool
	AgentDir      string
	Log           string // the agents' log file (warnings)
	CPUProfile    string // a child's CPU profile (pprof), written when it stops
	// GOGC and MemLimit are a child's GC target percentage and soft
	// memory limit in bytes (0: Go's default).
	GOGC     int
	MemLimit int64
	// Version is gpud's, registered with each agent's inventory.
	Version string
}

// start starts the range's agents (one goroutine each, tracked by wg),
// pacing them over Ramp, and returns once all are started; the agents run
// until ctx ends. closeLog closes the agents' log once they have stopped.
func (fc ltFleet) start(ctx context.Context, wg *sync.WaitGroup, sink ltSink, log *slog.Logger) (closeLog func(), err error) {
	keys, err := auth.LoadKeys(fc.KeyPath, fc.Cluster)
	if err != nil {
		return nil, fmt.Errorf("load the controller's token key: %w", err)
	}
	sysfs := filepath.Join(fc.AgentDir, "sysfs") // no NUMA topology: no cpusets
	if err := os.MkdirAll(sysfs, 0o755); err != nil {
		return nil, err
	}
	agentLog, err := os.OpenFile(fc.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	alog := slog.New(slog.NewTextHandler(agentLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	agentOpts := []node.Option{node.WithLogger(alog), node.WithRetryBackoff(200*time.Millisecond, 10*time.Second)}
	if fc.MemoryOutbox {
		agentOpts = append(agentOpts, node.WithMemoryOutbox())
	}
	n := fc.To - fc.From
	for i := fc.From; i < fc.To; i++ {
		name := fmt.Sprintf("lt%05d", i)
		tok, err := keys.Issue(auth.Claims{User: name, Role: auth.RoleNode, Node: name}, 24*time.Hour)
		if err != nil {
			agentLog.Close()
			return nil, err
		}
		answers := new(atomic.Int64)
		cl, err := ltClient(fc.Addr, fc.CA, tok, hostAddr(i), sink, answers)
		if err != nil {
			agentLog.Close()
			return nil, err
		}
		gpus := make([]spec.GPU, fc.GPUsPerNode)
		for g := range gpus {
			gpus[g] = spec.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Name: "NVIDIA H100 80GB HBM3", Model: "h100", MemMiB: 81559}
		}
		a, err := node.New(node.Config{
			Name:              name,
			StateDir:          filepath.Join(fc.AgentDir, name),
			Inventory:         spec.Inventory{CPUs: 16 * fc.GPUsPerNode, MemMiB: int64(fc.GPUsPerNode) * 128 << 10, GPUs: gpus},
			HeartbeatInterval: fc.Heartbeat,
			PollWait:          30 * time.Second,
			Hostname:          name,
			Version:           fc.Version,
			SysfsRoot:         sysfs,
			UsageInterval:     fc.UsageInterval,
			KillGrace:         time.Second,
		}, cl, &simRuntime{Runtime: fake.New(), sink: sink, answers: answers}, agentOpts...)
		if err != nil {
			agentLog.Close()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil {
				log.Error("simulated node agent failed", "node", name, "err", err)
			}
		}()
		if fc.Ramp > 0 && n > 1 && !ltSleep(ctx, fc.Ramp/time.Duration(n)) {
			agentLog.Close()
			return nil, ctx.Err()
		}
	}
	return func() { agentLog.Close() }, nil
}

// A child's report lines (standard output), one event each:
//
//	s JOB ALLOC NS P R   a container started (NS: Unix nanoseconds; P, R:
//	                     ltJob.placeAt and recvAt, 0 if unknown)
//	x ALLOC NS 0|1       a container exited (1: its runtime took the exit)
//	a USAGE NS ALLOC...  the controller acknowledged usage samples and exits
//	h 0|1                a heartbeat failed or was answered
//	g N                  the child's goroutines (once a second)

// childSink writes a child's report lines; a flusher sends them on.
type childSink struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (c *childSink) line(format string, args ...any) {
	c.mu.Lock()
	fmt.Fprintf(c.w, format, args...)
	c.mu.Unlock()
}

func (c *childSink) noteStarted(id spec.JobID, alloc string, at, placed, recv time.Time) {
	c.line("s %d %s %d %d %d\n", id, alloc, at.UnixNano(), unixNano(placed), unixNano(recv))
}

// unixNano is t's Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *childSink) noteExited(alloc string, at time.Time, counted bool) {
	n := 0
	if counted {
		n = 1
	}
	c.line("x %s %d %d\n", alloc, at.UnixNano(), n)
}

func (c *childSink) noteAcked(usage int, allocs []string, at time.Time) {
	c.line("a %d %d %s\n", usage, at.UnixNano(), strings.Join(allocs, " "))
}

func (c *childSink) noteHeartbeat(ok bool) {
	if ok {
		c.line("h 1\n")
	} else {
		c.line("h 0\n")
	}
}

func (c *childSink) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Flush()
}

// RunAgentsChild is `gpud loadtest --agents-child`: it reads its ltFleet
// from in, runs those agents and reports on out until in is closed (the
// parent is done) or ctx ends.
func RunAgentsChild(ctx context.Context, in io.Reader, out io.Writer, log *slog.Logger) error {
	dec := json.NewDecoder(in)
	var fc ltFleet
	if err := dec.Decode(&fc); err != nil {
		return fmt.Errorf("loadtest --agents-child: read the fleet from standard input: %w (this mode is for gpud loadtest --procs only)", err)
	}
	process.RaiseOpenFiles(log, "loadtest agents child")
	setAgentsGC(fc.GOGC, fc.MemLimit)
	if fc.CPUProfile != "" {
		stop, err := process.StartCPUProfile(fc.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, in) // EOF: the parent is done with us
		cancel()
	}()
	sink := &childSink{w: bufio.NewWriterSize(out, 64<<10)}
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n%10 == 0 {
				sink.line("g %d\n", goruntime.NumGoroutine())
			}
			if err := sink.flush(); err != nil {
				cancel() // the parent is gone
				return
			}
		}
	}()
	var wg sync.WaitGroup
	closeLog, err := fc.start(ctx, &wg, sink, log)
	if err != nil {
		cancel()
		wg.Wait()
		<-flushed
		return err
	}
	<-ctx.Done()
	wg.Wait()
	closeLog()
	<-flushed
	_ = sink.flush()
	return nil
}

// ltChildren are the agents' child processes of a --procs run.
type ltChildren struct {
	cmds       []*exec.Cmd
	stdins     []io.WriteCloser
	readers    sync.WaitGroup
	goroutines []atomic.Int64 // each child's last report
	once       sync.Once
}

// startChildren starts o.Procs children of o.Gpud, each with its share of
// the nodes, and feeds their reports into lt.
func (lt *loadtest) startChildren(o Options, fc ltFleet) (*ltChildren, error) {
	k := &ltChildren{goroutines: make([]atomic.Int64, o.Procs)}
	if o.AgentsGOGC > 0 {
		fc.GOGC = o.AgentsGOGC
		if mib, err := process.HostMemMiB(); err == nil {
			fc.MemLimit = (mib << 20) / 4 / int64(o.Procs)
		}
	}
	for p := range o.Procs {
		c := fc
		c.From, c.To = o.Nodes*p/o.Procs, o.Nodes*(p+1)/o.Procs
		if o.AgentsProfile != "" {
			abs, err := filepath.Abs(o.AgentsProfile)
			if err != nil {
				k.stop()
				return nil, err
			}
			c.CPUProfile = fmt.Sprintf("%s.%d", abs, p)
		}
		logf, err := os.Create(filepath.Join(o.Dir, fmt.Sprintf("agents-child-%d.log", p)))
		if err != nil {
			k.stop()
			return nil, err
		}
		args := []string{o.Gpud, "loadtest", "--agents-child", "--log-level", "warn"}
		if o.AgentsNice > 0 {
			// nice(1) execs the child with every thread it will make at
			// the lower priority; setpriority on the child's pid would
			// reach its first thread only.
			niceBin, err := exec.LookPath("nice")
			if err != nil {
				logf.Close()
				k.stop()
				return nil, fmt.Errorf("loadtest: --agents-nice needs nice(1) (coreutils): %w", err)
			}
			args = append([]string{niceBin, "-n", strconv.Itoa(o.AgentsNice)}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stderr = logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			logf.Close()
			k.stop()
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			logf.Close()
			k.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			logf.Close()
			k.stop()
			return nil, fmt.Errorf("loadtest: start agents child %d (%s loadtest --agents-child): %w", p, o.Gpud, err)
		}
		logf.Close() // the child has it
		k.cmds, k.stdins = append(k.cmds, cmd), append(k.stdins, stdin)
		if err := json.NewEncoder(stdin).Encode(c); err != nil {
			k.stop()
			return nil, fmt.Errorf("loadtest: send agents child %d its nodes: %w", p, err)
		}
		k.readers.Add(1)
		go func() {
			defer k.readers.Done()
			if err := lt.readChild(stdout, &k.goroutines[p]); err != nil {
				o.Log.Error("loadtest: agents child report unreadable", "child", p, "err", err)
			}
		}()
	}
	return k, nil
}

// readChild applies a child's report lines to lt.
func (lt *loadtest) readChild(r io.Reader, goroutines *atomic.Int64) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ns := func(s string) time.Time { v, _ := strconv.ParseInt(s, 10, 64); return time.Unix(0, v) }
	nsOrZero := func(s string) time.Time {
		if v, _ := strconv.ParseInt(s, 10, 64); v > 0 {
			return time.Unix(0, v)
		}
		return time.Time{}
	}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "s" && len(f) == 6:
			id, _ := strconv.ParseUint(f[1], 10, 64)
			lt.noteStarted(spec.JobID(id), f[2], ns(f[3]), nsOrZero(f[4]), nsOrZero(f[5]))
		case f[0] == "x" && len(f) == 4:
			lt.noteExited(f[1], ns(f[2]), f[3] == "1")
		case f[0] == "a" && len(f) >= 3:
			u, _ := strconv.Atoi(f[1])
			lt.noteAcked(u, f[3:], ns(f[2]))
		case f[0] == "h" && len(f) == 2:
			lt.noteHeartbeat(f[1] == "1")
		case f[0] == "g" && len(f) == 2:
			n, _ := strconv.ParseInt(f[1], 10, 64)
			goroutines.Store(n)
		default:
			return fmt.Errorf("unknown report line %q", sc.Text())
		}
	}
	return sc.Err()
}

// stop closes the children's standard input (they stop their agents and
// exit), waits up to 30 s for each (then kills it) and until their
// reports are read.
func (k *ltChildren) stop() {
	k.once.Do(func() {
		for _, in := range k.stdins {
			in.Close()
		}
		// The reports end when the children exit (exec.Cmd.Wait would
		// close the pipes under a reader still at the tail).
		read := make(chan struct{})
		go func() { k.readers.Wait(); close(read) }()
		var errs []error
		select {
		case <-read:
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("agents children did not stop in 30 s; killed"))
			for _, cmd := range k.cmds {
				_ = cmd.Process.Kill()
			}
			<-read
		}
		for i, cmd := range k.cmds {
			if err := cmd.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("agents child %d: %w", i, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			slog.Default().Warn("loadtest: agents children", "err", err)
		}
	})
}

// harnessStat is the harness's use: this process's and its agents
// children's together (all), and the first child's alone (first; zero
// without children), whose niceness the report compares with the
// controller's.
func (lt *loadtest) harnessStat() (all, first procUse) {
	all = procStat(os.Getpid())
	if lt.children != nil {
		for i, cmd := range lt.children.cmds {
			u := procStat(cmd.Process.Pid)
			if i == 0 {
				first = u
			}
			all = all.plus(u)
		}
	}
	return all, first
}

// harnessGoroutines is this process's goroutines and those the children
// last reported.
func (lt *loadtest) harnessGoroutines() int {
	n := goruntime.NumGoroutine()
	if lt.children != nil {
		for i := range lt.children.goroutines {
			n += int(lt.children.goroutines[i].Load())
		}
	}
	return n
}

// setAgentsGC sets an agents child's GC target and memory limit, unless
// GOGC or GOMEMLIMIT in the environment say otherwise. Hundreds of agents
// in one process allocate at hundreds of nodes' rate: at Go's default
// (GOGC=100) a fifth of the child's CPU went to collecting, a cost each
// real node pays on its own small heap. A higher target collects less
// often; the memory limit brings collection back before a big fleet's
// heap grows past its share of the host.
func setAgentsGC(gogc int, limit int64) {
	if gogc <= 0 {
		return
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gogc)
	}
	if limit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
	}
}
