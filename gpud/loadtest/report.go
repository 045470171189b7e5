package loadtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/plot"
)

// ltSample is the fleet and the controller at one second of the run.
type ltSample struct {
	at                                       time.Time
	acked, started, freed, heartbeats, usage int64
	cpu                                      float64 // controller CPU seconds so far
	rss, written, stateDB, acctDB            int64
	harnessRSS                               int64   // this process (the agents)
	harnessCPU                               float64 // this process's CPU seconds so far
	load1                                    float64 // the machine's 1-minute load average
	minflt, harnessMinflt                    int64   // minor page faults so far
	machineTotal, machineIdle, machineKernel int64   // the machine's CPU ticks so far (/proc/stat)
}

// ltSampler takes an ltSample every second.
type ltSampler struct {
	lt      *loadtest
	ctl     *ltController
	samples []ltSample
	// niceSeen is the agents children's niceness over the controller's
	// at the last sample that could read both.
	niceSeen int64
}

func newSampler(lt *loadtest, ctl *ltController) *ltSampler {
	s := &ltSampler{lt: lt, ctl: ctl}
	s.take()
	return s
}

func (s *ltSampler) take() {
	c := procStat(s.ctl.cmd.Process.Pid)
	h, child := s.lt.harnessStat()
	total, idle, kernel := machineCPU()
	if c.read && child.read {
		s.niceSeen = child.nice - c.nice
	}
	dir := s.ctl.cfg.Controller.StateDir
	s.samples = append(s.samples, ltSample{at: time.Now(), acked: s.lt.acked.Load(), started: s.lt.started.Load(),
		freed: s.lt.freed.Load(), heartbeats: s.lt.heartbeats.Load(), usage: s.lt.usage.Load(),
		cpu: c.cpu, rss: c.rss, harnessRSS: h.rss, harnessCPU: h.cpu, load1: loadAvg1(), written: c.written, stateDB: dbSize(filepath.Join(dir, "state.db")), acctDB: dbSize(s.ctl.cfg.AccountingPath()),
		minflt: c.minflt, harnessMinflt: h.minflt, machineTotal: total, machineIdle: idle, machineKernel: kernel})
}

func (s *ltSampler) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.take()
			return
		case <-t.C:
			s.take()
		}
	}
}

// window returns the first and last samples within [from, to].
func (s *ltSampler) window(from, to time.Time) (a, b ltSample, ok bool) {
	i := slices.IndexFunc(s.samples, func(x ltSample) bool { return !x.at.Before(from) })
	if i < 0 {
		return a, b, false
	}
	j := i
	for j+1 < len(s.samples) && !s.samples[j+1].at.After(to) {
		j++
	}
	return s.samples[i], s.samples[j], j > i
}

// Report is what a run measured.
type Report struct {
	Nodes, GPUsPerNode, Jobs, Procs           int
	AgentsNice                                int   // the agents children's niceness over the controller's, asked
	AgentsNiceSeen                            int64 // and as /proc showed it during the run
	Acked, Rejected                           int64
	Offered                                   float64 // --rate: submissions/s offered (0: closed loop)
	SubmitPerSec                              float64
	StartsPerSec, StartsPeak, StartsSustained float64
	SubmitStart, EndFree                      [3]time.Duration // p50, p99, max
	// SubmitAck is the submission call's own time: sent → acknowledged
	// (the job durable), p50, p99, max; the rest of submit→start is the
	// start (placement, the node's assignment, its runtime).
	SubmitAck [3]time.Duration
	// Stages of submit→start, p50, p99, max, where the agent saw them
	// (ltJob.placeAt, recvAt): sent → the allocation's start as the agent
	// got it (the controller's placement plus the answer's delay),
	// placed → the agent's assignments answer, answer → the runtime's
	// start.
	SubmitPlaced, PlacedAnswer, AnswerStart [3]time.Duration
	HeartbeatsPerSec, HeartbeatsExpected    float64
	HeartbeatErrors, UsageSamples           int64
	// AssignmentsPerStart and EventsPerStart are the node requests the
	// controller answered during the workload (its /metrics, every node
	// together: assignments long-poll answers, events posts) per job
	// acknowledged, each of which starts once.
	AssignmentsPerStart, EventsPerStart float64
	CPUWork, CPUHold, CPUPeak5s         float64 // controller cores
	HarnessCPUWork, HarnessCPUHold      float64 // this process's cores
	// CPUPer1kStarts is the controller's CPU seconds per 1,000 job starts
	// from when jobs could start to the last exit: the cost of a start,
	// which a loaded machine slows but does not inflate much.
	CPUPer1kStarts     float64
	HarnessPer1kStarts float64 // the same for the harness (agents and submitters)
	LoadMin, LoadMax   float64 // the machine's 1-minute load average over the run
	// MachineBusy and MachineKernel are the fractions of the machine's
	// CPU time (every process, /proc/stat) not idle, and in the kernel,
	// during the workload: near 1, requests queue for a core.
	MachineBusy, MachineKernel float64
	// FaultsPerJob and HarnessFaultsPerJob are the controller's and the
	// harness's minor page faults during the workload per job acknowledged.
	FaultsPerJob, HarnessFaultsPerJob float64
	RSSBare, RSSIdle, RSSPeak, RSSEnd int64
	WrittenPerSec                     float64 // controller bytes/s to storage
	StateGrowth, AcctGrowth           float64 // bytes/s of the databases (with WAL)
	StateDB, AcctDB                   int64   // bytes at the end
	Workload, Hold                    time.Duration
	HarnessGoroutines                 int
	HarnessRSSIdle, HarnessRSSPeak    int64
	Accounted                         int
	Lost                              []string
	NotUp                             []string
}

func pct(ds []time.Duration) [3]time.Duration {
	if len(ds) == 0 {
		return [3]time.Duration{}
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return [3]time.Duration{at(0.50), at(0.99), ds[len(ds)-1]}
}

// report sums up the run: wl is when the workload began, opened when jobs
// could start (later than wl with --preload), subDone when the
// last submission was acknowledged, drained when the last exit was.
func (lt *loadtest) report(s *ltSampler, wl, opened, subDone, drained time.Time) *Report {
	o := lt.o
	r := &Report{Nodes: o.Nodes, GPUsPerNode: o.GPUsPerNode, Procs: o.Procs, AgentsNice: o.AgentsNice, Acked: lt.acked.Load(), Rejected: lt.rejected.Load(), Offered: o.Rate,
		HeartbeatErrors: lt.hbErrors.Load(), UsageSamples: lt.usage.Load()}
	end := s.samples[len(s.samples)-1].at
	r.Workload, r.Hold = drained.Sub(wl), end.Sub(drained)
	if d := subDone.Sub(wl).Seconds(); d > 0 {
		r.SubmitPerSec = float64(r.Acked) / d
	}
	var ss, sa, ef, sp, pa, as []time.Duration
	var firstStart, lastStart time.Time
	lt.mu.Lock()
	r.Jobs = len(lt.jobs)
	for _, j := range lt.jobs {
		if !j.sentAt.IsZero() && !j.ackAt.IsZero() {
			sa = append(sa, j.ackAt.Sub(j.sentAt))
		}
		if j.starts == 0 {
			continue
		}
		if !j.sentAt.IsZero() {
			ss = append(ss, j.startAt.Sub(j.sentAt))
			if !j.placeAt.IsZero() && !j.recvAt.IsZero() {
				sp = append(sp, j.placeAt.Sub(j.sentAt))
				pa = append(pa, j.recvAt.Sub(j.placeAt))
				as = append(as, j.startAt.Sub(j.recvAt))
			}
		}
		if firstStart.IsZero() || j.startAt.Before(firstStart) {
			firstStart = j.startAt
		}
		if j.startAt.After(lastStart) {
			lastStart = j.startAt
		}
	}
	for _, a := range lt.allocs {
		if !a.exitAt.IsZero() && !a.freeAt.IsZero() {
			ef = append(ef, a.freeAt.Sub(a.exitAt))
		}
	}
	lt.mu.Unlock()
	r.SubmitStart, r.SubmitAck, r.EndFree = pct(ss), pct(sa), pct(ef)
	r.SubmitPlaced, r.PlacedAnswer, r.AnswerStart = pct(sp), pct(pa), pct(as)
	if d := lastStart.Sub(firstStart).Seconds(); d > 0 {
		r.StartsPerSec = float64(lt.started.Load()) / d
	}
	// Per-second starts while jobs were queued: the rate the controller
	// holds when it has work, not limited by submissions.
	var busy []float64
	for i := 1; i < len(s.samples); i++ {
		a, b := s.samples[i-1], s.samples[i]
		rate := float64(b.started-a.started) / b.at.Sub(a.at).Seconds()
		r.StartsPeak = max(r.StartsPeak, rate)
		if a.acked-a.started > 0 && b.acked-b.started > 0 && !a.at.Before(opened) {
			busy = append(busy, rate)
		}
		if i >= 5 {
			c := s.samples[i-5]
			r.CPUPeak5s = max(r.CPUPeak5s, (b.cpu-c.cpu)/b.at.Sub(c.at).Seconds())
		}
		r.RSSPeak = max(r.RSSPeak, b.rss)
		r.HarnessRSSPeak = max(r.HarnessRSSPeak, b.harnessRSS)
	}
	if len(busy) > 0 {
		sum := 0.0
		for _, b := range busy {
			sum += b
		}
		r.StartsSustained = sum / float64(len(busy))
	}
	r.AgentsNiceSeen = s.niceSeen
	first := s.samples[0]
	r.RSSIdle, r.RSSEnd = first.rss, s.samples[len(s.samples)-1].rss
	if a, b, ok := s.window(wl, drained); ok {
		d := b.at.Sub(a.at).Seconds()
		r.CPUWork = (b.cpu - a.cpu) / d
		r.HarnessCPUWork = (b.harnessCPU - a.harnessCPU) / d
		r.WrittenPerSec = float64(b.written-a.written) / d
		r.StateGrowth = float64(b.stateDB-a.stateDB) / d
		r.AcctGrowth = float64(b.acctDB-a.acctDB) / d
		if t := b.machineTotal - a.machineTotal; t > 0 {
			r.MachineBusy = 1 - float64(b.machineIdle-a.machineIdle)/float64(t)
			r.MachineKernel = float64(b.machineKernel-a.machineKernel) / float64(t)
		}
		if n := b.acked - a.acked; n > 0 {
			r.FaultsPerJob = float64(b.minflt-a.minflt) / float64(n)
			r.HarnessFaultsPerJob = float64(b.harnessMinflt-a.harnessMinflt) / float64(n)
		}
	}
	if a, b, ok := s.window(opened, drained); ok && b.started > a.started {
		r.CPUPer1kStarts = (b.cpu - a.cpu) / float64(b.started-a.started) * 1000
		r.HarnessPer1kStarts = (b.harnessCPU - a.harnessCPU) / float64(b.started-a.started) * 1000
	}
	r.LoadMin = s.samples[0].load1
	for _, x := range s.samples {
		r.LoadMin, r.LoadMax = min(r.LoadMin, x.load1), max(r.LoadMax, x.load1)
	}
	hbFrom := wl
	if a, b, ok := s.window(drained, end); ok && r.Hold >= 5*time.Second {
		d := b.at.Sub(a.at).Seconds()
		r.CPUHold = (b.cpu - a.cpu) / d
		r.HarnessCPUHold = (b.harnessCPU - a.harnessCPU) / d
		hbFrom = drained
		r.HeartbeatsPerSec = float64(b.heartbeats-a.heartbeats) / d
	} else if a, b, ok := s.window(hbFrom, end); ok {
		r.HeartbeatsPerSec = float64(b.heartbeats-a.heartbeats) / b.at.Sub(a.at).Seconds()
	}
	r.HeartbeatsExpected = float64(o.Nodes) / o.Heartbeat.Seconds()
	return r
}

// loadAvg1 is the machine's 1-minute load average (0 if unreadable).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\n== gpud loadtest: %d nodes × %d GPUs, %d jobs acknowledged (%d refusals retried)\n", r.Nodes, r.GPUsPerNode, r.Acked, r.Rejected)
	fmt.Fprintf(w, "workload %s, then hold %s\n", r.Workload.Round(time.Millisecond), r.Hold.Round(time.Millisecond))
	if r.Offered > 0 {
		fmt.Fprintf(w, "submissions/s acknowledged   %.0f of %.0f offered (latencies from when each job was due)\n", r.SubmitPerSec, r.Offered)
	} else {
		fmt.Fprintf(w, "submissions/s acknowledged   %.0f\n", r.SubmitPerSec)
	}
	fmt.Fprintf(w, "job starts/s                 %.0f mean (first to last start), %.0f sustained (mean of the seconds with jobs queued), %.0f peak 1-s\n",
		r.StartsPerSec, r.StartsSustained, r.StartsPeak)
	fmt.Fprintf(w, "submit→start                 p50 %s  p99 %s  max %s\n", r.SubmitStart[0].Round(time.Millisecond), r.SubmitStart[1].Round(time.Millisecond), r.SubmitStart[2].Round(time.Millisecond))
	fmt.Fprintf(w, "  of which submit→ack         p50 %s  p99 %s  max %s\n", r.SubmitAck[0].Round(time.Millisecond), r.SubmitAck[1].Round(time.Millisecond), r.SubmitAck[2].Round(time.Millisecond))
	for _, st := range []struct {
		name string
		d    [3]time.Duration
	}{{"submit→placed", r.SubmitPlaced}, {"placed→answer", r.PlacedAnswer}, {"answer→running", r.AnswerStart}} {
		fmt.Fprintf(w, "  stage %-21s p50 %s  p99 %s  max %s\n", st.name, st.d[0].Round(time.Millisecond), st.d[1].Round(time.Millisecond), st.d[2].Round(time.Millisecond))
	}
	fmt.Fprintf(w, "end→node-free                p50 %s  p99 %s  max %s\n", r.EndFree[0].Round(time.Millisecond), r.EndFree[1].Round(time.Millisecond), r.EndFree[2].Round(time.Millisecond))
	fmt.Fprintf(w, "heartbeats/s held            %.0f (expected %.0f), %d failed; %d usage samples taken\n", r.HeartbeatsPerSec, r.HeartbeatsExpected, r.HeartbeatErrors, r.UsageSamples)
	if r.AssignmentsPerStart > 0 {
		fmt.Fprintf(w, "node requests per start      %.2f assignments answers, %.2f events posts (every node, during the workload)\n", r.AssignmentsPerStart, r.EventsPerStart)
	}
	fmt.Fprintf(w, "controller CPU               %.2f cores during the workload, %.2f during the hold, %.2f peak 5-s\n", r.CPUWork, r.CPUHold, r.CPUPeak5s)
	if r.CPUPer1kStarts > 0 {
		fmt.Fprintf(w, "controller CPU per start     %.2f CPU-seconds per 1,000 starts (jobs startable to last exit): %.0f starts per controller core-second; harness %.2f CPU-seconds per 1,000\n",
			r.CPUPer1kStarts, 1000/r.CPUPer1kStarts, r.HarnessPer1kStarts)
	}
	nice := ""
	if r.AgentsNiceSeen != 0 {
		nice = fmt.Sprintf(" (the agents children at nice %+d over the controller: --agents-nice)", r.AgentsNiceSeen)
	}
	fmt.Fprintf(w, "harness CPU                  %.2f cores during the workload, %.2f during the hold%s\n", r.HarnessCPUWork, r.HarnessCPUHold, nice)
	fmt.Fprintf(w, "machine load average (1 min) %.1f–%.1f over the run\n", r.LoadMin, r.LoadMax)
	if r.MachineBusy > 0 {
		fmt.Fprintf(w, "machine CPU busy             %.0f%% during the workload (%.0f%% in the kernel)\n", 100*r.MachineBusy, 100*r.MachineKernel)
	}
	if r.FaultsPerJob > 0 {
		fmt.Fprintf(w, "minor page faults per job    controller %.1f, harness %.1f during the workload (each a first touch of memory the process grows into)\n", r.FaultsPerJob, r.HarnessFaultsPerJob)
	}
	perJob := "no jobs"
	if r.Acked > 0 {
		perJob = fmt.Sprintf("%.1f KiB/job over idle", float64(r.RSSPeak-r.RSSIdle)/1024/float64(r.Acked))
	}
	fmt.Fprintf(w, "controller RSS               %.0f MiB before the fleet, %.0f MiB with it idle (%.1f KiB/node), %.0f MiB peak (%s), %.0f MiB at the end\n",
		mib(r.RSSBare), mib(r.RSSIdle), float64(r.RSSIdle-r.RSSBare)/1024/float64(max(r.Nodes, 1)), mib(r.RSSPeak), perJob, mib(r.RSSEnd))
	fmt.Fprintf(w, "controller writes            %.1f MiB/s to storage; state.db %+.1f KiB/s, accounting.db %+.1f KiB/s (with WAL)\n",
		r.WrittenPerSec/(1<<20), r.StateGrowth/1024, r.AcctGrowth/1024)
	fmt.Fprintf(w, "database sizes at the end    state.db %.1f MiB, accounting.db %.1f MiB (with WAL)\n", mib(r.StateDB), mib(r.AcctDB))
	fmt.Fprintf(w, "harness (agents, %d process) %d goroutines (%.1f/node) and %.0f MiB RSS (%.0f KiB/node) with the fleet idle, %.0f MiB peak\n",
		max(r.Procs, 1), r.HarnessGoroutines, float64(r.HarnessGoroutines)/float64(max(r.Nodes, 1)), mib(r.HarnessRSSIdle),
		float64(r.HarnessRSSIdle)/1024/float64(max(r.Nodes, 1)), mib(r.HarnessRSSPeak))
	if len(r.NotUp) > 0 {
		fmt.Fprintf(w, "nodes not idle at the end    %d: %v\n", len(r.NotUp), r.NotUp[:min(len(r.NotUp), 10)])
	} else {
		fmt.Fprintf(w, "nodes not idle at the end    none\n")
	}
	if len(r.Lost) == 0 {
		fmt.Fprintf(w, "nothing lost: all %d acknowledged jobs ended exactly once in accounting (COMPLETED)\n", r.Accounted)
		return
	}
	fmt.Fprintf(w, "PROBLEMS: %d (%d of %d acknowledged jobs accounted once):\n", len(r.Lost), r.Accounted, r.Acked)
	for _, l := range r.Lost[:min(len(r.Lost), 20)] {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// plot writes starts/s, queue depth (acknowledged, not started) and
// the submit→start latency (p50 and p99 of the jobs started in each
// second) over the run.
func (s *ltSampler) plot(path string) error {
	var t, starts, queue []float64
	t0 := s.samples[0].at
	for i := 1; i < len(s.samples); i++ {
		a, b := s.samples[i-1], s.samples[i]
		x := b.at.Sub(t0).Seconds()
		t = append(t, x)
		starts = append(starts, float64(b.started-a.started)/b.at.Sub(a.at).Seconds())
		queue = append(queue, float64(b.acked-b.started))
	}
	lt, p50, p99 := s.startLatency()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = plot.Write(f, path,
		plot.Lines{Title: fmt.Sprintf("gpud loadtest: job starts per second (%d nodes)", s.lt.o.Nodes), XLabel: "seconds", YLabel: "starts/s",
			Series: []plot.Series{{Name: "starts/s", X: t, Y: starts}}},
		plot.Lines{Title: "queue depth (acknowledged, not started)", XLabel: "seconds", YLabel: "jobs",
			Series: []plot.Series{{Name: "queued", X: t, Y: queue}}},
		plot.Lines{Title: "submit to start of the jobs started in each second", XLabel: "seconds", YLabel: "seconds",
			Series: []plot.Series{{Name: "p99", X: lt, Y: p99}, {Name: "p50", X: lt, Y: p50}}})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// startLatency is submit→start (seconds) of the jobs that started
// between each two samples, p50 and p99, at the later sample's time
// (seconds since the first); seconds with no start are left out.
func (s *ltSampler) startLatency() (t, p50, p99 []float64) {
	type st struct{ at, d time.Time }
	s.lt.mu.Lock()
	js := make([]st, 0, len(s.lt.jobs))
	for _, j := range s.lt.jobs {
		if j.starts > 0 && !j.sentAt.IsZero() {
			js = append(js, st{j.startAt, j.sentAt})
		}
	}
	s.lt.mu.Unlock()
	slices.SortFunc(js, func(a, b st) int { return a.at.Compare(b.at) })
	t0 := s.samples[0].at
	k := 0
	var ds []time.Duration
	for i := 1; i < len(s.samples); i++ {
		ds = ds[:0]
		for ; k < len(js) && !js[k].at.After(s.samples[i].at); k++ {
			ds = append(ds, js[k].at.Sub(js[k].d))
		}
		if len(ds) == 0 {
			continue
		}
		p := pct(ds)
		t = append(t, s.samples[i].at.Sub(t0).Seconds())
		p50 = append(p50, p[0].Seconds())
		p99 = append(p99, p[1].Seconds())
	}
	return t, p50, p99
}
