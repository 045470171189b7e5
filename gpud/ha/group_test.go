package ha_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/ha"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// member is one in-process member of a test group: its own state.db,
// accounting.db, Raft node (real TLS on loopback), controller and API on
// a unix socket.
type member struct {
	t     testing.TB
	id    string
	dir   string
	sock  string
	peers []ha.Peer
	tune  func(*ha.Config)
	ca    *auth.CA

	st     *store.Store
	acct   *accounting.DB
	g      *ha.Group
	ctrl   *controller.Controller
	cancel context.CancelFunc
	wg     sync.WaitGroup
	up     bool
}

// group is a test group of n members.
type group struct {
	t       testing.TB
	members []*member
}

func newCA(t testing.TB) *auth.CA {
	t.Helper()
	files, err := auth.EnsureTLS(t.TempDir(), "test", []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := auth.LoadCA(files, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}

// freeAddrs returns n distinct free loopback addresses: each listener is
// held until all are taken, since the kernel may hand a port closed a
// moment ago to the next bind to port 0 ("found duplicate address in
// configuration" once in a full run).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// steady tunes a group for tests that replicate, not fail over: Raft's
// production timings (a 400 ms lease) let a machine loaded enough to delay
// heartbeats depose a healthy leader mid-test ("leadership lost while
// committing", seen in a full run at load 40); these tests are not about
// that, the failover tests keep the production timings.
func steady(c *ha.Config) {
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 1500*time.Millisecond
}

func startGroup(t testing.TB, n int, tune func(*ha.Config)) *group {
	t.Helper()
	ca := newCA(t)
	var peers []ha.Peer
	for i, addr := range freeAddrs(t, n) {
		id := string(rune('a' + i))
		peers = append(peers, ha.Peer{ID: id, Raft: addr, API: "https://" + id + ".example:6817"})
	}
	g := &group{t: t}
	for _, p := range peers {
		m := &member{t: t, id: p.ID, dir: shortDir(t), peers: peers, tune: tune, ca: ca}
		g.members = append(g.members, m)
	}
	for _, m := range g.members {
		m.start()
	}
	t.Cleanup(func() {
		for _, m := range g.members {
			m.stop()
		}
	})
	return g
}

func (m *member) start() {
	t := m.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	var err error
	if m.st, err = store.Open(ctx, filepath.Join(m.dir, "state.db"), store.Replica()); err != nil {
		t.Fatal(err)
	}
	if m.acct, err = accounting.Open(filepath.Join(m.dir, "accounting.db")); err != nil {
		t.Fatal(err)
	}
	srvTLS, cliTLS, err := m.ca.MemberTLS(m.id)
	if err != nil {
		t.Fatal(err)
	}
	var self ha.Peer
	for _, p := range m.peers {
		if p.ID == m.id {
			self = p
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", m.id)
	cfg := ha.Config{ID: m.id, RaftListen: self.Raft, Peers: m.peers, Dir: filepath.Join(m.dir, "raft"),
		ServerTLS: srvTLS, ClientTLS: cliTLS, Log: log}
	if m.tune != nil {
		m.tune(&cfg)
	}
	if m.g, err = ha.Open(cfg, m.st, m.acct); err != nil {
		t.Fatal(err)
	}
	ccfg := controller.DefaultConfig()
	ccfg.AllowRootJobs = true
	if m.ctrl, err = controller.New(ccfg, m.g, controller.WithLogger(log), controller.WithRecorder(m.g), controller.WithFollower(),
		controller.WithGroupCommit(2*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	m.sock = filepath.Join(m.dir, "gpud.sock")
	ln, err := server.ListenUnix(m.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(m.ctrl, server.WithLogger(log), server.WithHA(m.g), server.WithUsageRecorder(m.g), server.WithAccounting(m.acct))
	m.wg.Go(func() { _ = m.ctrl.Run(ctx) })
	m.wg.Go(func() { _ = m.g.Run(ctx, m.ctrl) })
	m.wg.Go(func() { _ = srv.Serve(ctx, ln) })
	m.up = true
}

// stop stops the member as a crash would look to the others (its Raft
// traffic ends at once); its files stay.
func (m *member) stop() {
	if !m.up {
		return
	}
	m.up = false
	m.g.Close()
	m.cancel()
	m.wg.Wait()
	m.acct.Close()
	m.st.Close()
}

func (m *member) client() *api.Client {
	c, err := api.NewClient("unix://" + m.sock)
	if err != nil {
		m.t.Fatal(err)
	}
	return c
}

// leader waits (at most within) for exactly one running member to serve
// as leader, and returns it.
func (g *group) leader(within time.Duration) *member {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var found []*member
		for _, m := range g.members {
			if m.up {
				if ok, _ := m.g.Leader(); ok {
					found = append(found, m)
				}
			}
		}
		if len(found) == 1 {
			return found[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.t.Fatalf("no single leader within %v", within)
	return nil
}

// follower is a member other than l (the last such, as the tests
// always picked).
func (g *group) follower(l *member) *member {
	var f *member
	for _, m := range g.members {
		if m != l {
			f = m
		}
	}
	return f
}

func js(name string) spec.JobSpec {
	return spec.JobSpec{Name: name, Script: "#!/bin/sh\necho hi\n", WorkDir: "/tmp", Requeue: true}
}

func submit(t testing.TB, m *member, n int) []spec.JobID {
	t.Helper()
	var ids []spec.JobID
	for range n {
		r, err := m.client().Submit(context.Background(), api.SubmitRequest{Job: js("j")})
		if err != nil {
			t.Fatalf("submit to %s: %v", m.id, err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// replicaJobs lists the jobs m's own state.db holds.
func replicaJobs(t testing.TB, m *member) map[spec.JobID]spec.JobState {
	t.Helper()
	jobs, _, _, err := m.st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[spec.JobID]spec.JobState{}
	for _, j := range jobs {
		out[j.ID] = j.State
	}
	return out
}

// wipe stops follower f and empties its directory, then submits n more
// jobs through leader l and waits until l has taken a snapshot (the
// group's tune must snapshot often): f, started again, must install it.
func wipe(t testing.TB, l, f *member, n int) {
	t.Helper()
	f.stop()
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	submit(t, l, n)
	waitFor(t, 10*time.Second, "a snapshot on the leader", func() bool { return len(snapshots(l)) > 0 })
}

// snapshots are the Raft snapshots m holds.
func snapshots(m *member) []string {
	snaps, _ := filepath.Glob(filepath.Join(m.dir, "raft", "snapshots", "*", "state.bin"))
	return snaps
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A group elects one leader; what it acknowledges is in every member's
// state.db; a follower refuses writes naming the leader and marks its
// reads stale; when the leader dies another takes over with every
// acknowledged job and never reuses an id.
func TestGroupReplicatesAndFailsOver(t *testing.T) {
	g := startGroup(t, 3, nil)
	l := g.leader(10 * time.Second)
	ids := submit(t, l, 20)
	for _, m := range g.members {
		waitFor(t, 5*time.Second, "member "+m.id+" has the 20 jobs", func() bool { return len(replicaJobs(t, m)) == 20 })
	}

	f := g.follower(l)
	_, err := f.client().Submit(context.Background(), api.SubmitRequest{Job: js("x")})
	if !errors.Is(err, spec.ErrNotLeader) {
		t.Fatalf("submit to follower %s: %v; want not_leader", f.id, err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", f.sock)
	}}}
	resp, err := hc.Post("http://gpud/v1/jobs", "application/json", strings.NewReader(`{"job":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get(api.HeaderLeader) != "https://"+l.id+".example:6817" {
		t.Errorf("follower answered a write %d with %s %q; want 421 naming the leader", resp.StatusCode, api.HeaderLeader, resp.Header.Get(api.HeaderLeader))
	}
	waitFor(t, 5*time.Second, "follower view refreshed", func() bool {
		resp, err := hc.Get("http://gpud/v1/jobs")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get(api.HeaderStale) != "true" {
			t.Fatalf("follower read without %s: true", api.HeaderStale)
		}
		jobs, err := f.client().Jobs(context.Background(), api.JobFilter{All: true})
		return err == nil && len(jobs) == 20
	})
	resp, err = hc.Get("http://gpud/v1/controllers")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/controllers on a follower: %d", resp.StatusCode)
	}

	start := time.Now()
	l.stop()
	nl := g.leader(5 * time.Second)
	t.Logf("new leader %s serving %v after the old one stopped", nl.id, time.Since(start).Round(time.Millisecond))
	more := submit(t, nl, 5)
	for _, id := range more {
		for _, old := range ids {
			if id <= old {
				t.Fatalf("new leader gave id %d, not above the old leader's %d", id, old)
			}
		}
	}
	have := replicaJobs(t, nl)
	for _, id := range append(ids, more...) {
		if _, ok := have[id]; !ok {
			t.Errorf("job %d missing on the new leader", id)
		}
	}
}

// Ended jobs reach every member's accounting.db once, through the log.
func TestAccountingReplicated(t *testing.T) {
	g := startGroup(t, 3, steady)
	l := g.leader(10 * time.Second)
	ids := submit(t, l, 5)
	for _, id := range ids {
		if _, err := l.client().JobAction(context.Background(), id, "cancel", api.JobActionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range g.members {
		waitFor(t, 10*time.Second, "member "+m.id+" accounts the 5 cancelled jobs", func() bool {
			recs, err := m.acct.Jobs(context.Background(), accounting.Filter{IDs: ids})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[spec.JobID]int{}
			for _, r := range recs {
				seen[r.ID]++
				if seen[r.ID] > 1 {
					t.Fatalf("member %s accounts job %d twice", m.id, r.ID)
				}
			}
			return len(seen) == 5
		})
	}
}

// A member that lost its whole state directory catches up from a
// snapshot: the leader has compacted the log it would need.
func TestEmptyMemberCatchesUpFromSnapshot(t *testing.T) {
	tune := func(c *ha.Config) {
		steady(c) // a replication test: see TestGroupConfigReplicated
		c.SnapshotThreshold, c.TrailingLogs, c.SnapshotInterval = 16, 4, 50*time.Millisecond
	}
	g := startGroup(t, 3, tune)
	l := g.leader(10 * time.Second)
	f := g.follower(l)
	submit(t, l, 50)
	wipe(t, l, f, 50)
	f.start()
	want := replicaJobs(t, l)
	waitFor(t, 60*time.Second, "the new member has all 100 jobs", func() bool { return len(replicaJobs(t, f)) == len(want) && len(want) == 100 })
	if len(snapshots(f)) == 0 {
		t.Error("the new member caught up without installing a snapshot; the test no longer shows snapshot catch-up")
	}
	for id, st := range replicaJobs(t, f) {
		if want[id] != st {
			t.Errorf("job %d: %s on the new member, %s on the leader", id, st, want[id])
		}
	}
}

// BenchmarkSubmitParallel8HA is gpud/server's BenchmarkSubmitParallel8
// against the leader of a 3-member group in this process: acknowledged
// submissions per second from 8 clients, each acknowledged only once a
// majority has it on disk.
func BenchmarkSubmitParallel8HA(b *testing.B) {
	var commits, waited atomic.Int64
	g := startGroup(b, 3, func(c *ha.Config) {
		c.Observe = func(d time.Duration) { commits.Add(1); waited.Add(int64(d)) }
	})
	l := g.leader(10 * time.Second)
	c := l.client()
	var next atomic.Int64
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime(b)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Submit(context.Background(), api.SubmitRequest{Job: js("bench")}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
	// The whole process's CPU: the three members and the clients. Less
	// sensitive to a busy machine than the rate.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/1e3, "cpu-us/submit")
	if n := commits.Load(); n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "submits/commit")
		b.ReportMetric(float64(waited.Load())/float64(n)/1e6, "ms/commit")
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFailover stops the leader of a 3-member group b.N times (its
// Raft traffic ends at once, as at a crash; the member is then restarted
// on its files) and reports how long the others took to have a new leader
// serving, as a distribution: p50, p90 and max in ms.
func BenchmarkFailover(b *testing.B) {
	g := startGroup(b, 3, nil)
	var took []time.Duration
	for b.Loop() {
		l := g.leader(30 * time.Second)
		start := time.Now()
		l.stop()
		nl := g.leader(30 * time.Second)
		took = append(took, time.Since(start))
		if nl == l {
			b.Fatal("the stopped member leads")
		}
		l.start()
		// Let it catch up and settle as a follower before the next kill.
		waitFor(b, 30*time.Second, "restarted member following", func() bool {
			cs, err := l.g.Controllers(context.Background())
			return err == nil && cs.Leader == nl.id
		})
	}
	slices.Sort(took)
	q := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.9), "p90-ms")
	b.ReportMetric(q(1), "max-ms")
}

// An admin adds a fourth member at the leader (it started with join =
// true and an empty state dir) and it receives the state; removing it
// leaves three, and a follower refuses membership changes.
func TestAddRemoveMember(t *testing.T) {
	g := startGroup(t, 3, steady)
	l := g.leader(10 * time.Second)
	submit(t, l, 10)
	d := &member{t: t, id: "d", dir: shortDir(t), ca: g.members[0].ca,
		peers: append(slices.Clone(g.members[0].peers), ha.Peer{ID: "d", Raft: freeAddr(t), API: "https://d.example:6817"}),
		tune:  func(c *ha.Config) { c.Join = true }}
	d.start()
	t.Cleanup(d.stop)
	f := g.follower(l)
	self := d.peers[len(d.peers)-1]
	add := api.ControllerMember{ID: self.ID, RaftAddress: self.Raft, APIAddress: self.API}
	if err := f.g.AddMember(context.Background(), add); !errors.Is(err, spec.ErrNotLeader) {
		t.Errorf("AddMember at a follower: %v; want not_leader", err)
	}
	if _, err := f.client().AddController(context.Background(), add); !errors.Is(err, spec.ErrNotLeader) {
		t.Errorf("POST /v1/controllers at a follower (gpuq controllers add over its socket alone): %v; want not_leader", err)
	}
	// gpuq controllers add's call, as root on the leader's socket (admin).
	if res, err := l.client().AddController(context.Background(), add); err != nil || len(res.Members) != 4 {
		t.Fatalf("POST /v1/controllers at the leader: %+v %v; want 4 members", res, err)
	}
	waitFor(t, 10*time.Second, "the new member has the 10 jobs", func() bool { return len(replicaJobs(t, d)) == 10 })
	cs, err := d.g.Controllers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Members) != 4 || cs.Leader != l.id {
		t.Fatalf("the new member sees %+v; want 4 members led by %s", cs, l.id)
	}
	for _, m := range cs.Members {
		if m.ID == l.id && m.APIAddress != "https://"+l.id+".example:6817" {
			t.Errorf("the new member knows the leader's API address as %q", m.APIAddress)
		}
	}
	if res, err := l.client().RemoveController(context.Background(), "d"); err != nil || len(res.Members) != 3 {
		t.Fatalf("DELETE /v1/controllers/d at the leader: %+v %v; want 3 members", res, err)
	}
	if err := l.g.RemoveMember(context.Background(), "nope"); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("removing an unknown member: %v; want not found", err)
	}
	cs, err = l.g.Controllers(context.Background())
	if err != nil || len(cs.Members) != 3 {
		t.Fatalf("after the removal: %+v, %v; want 3 members", cs, err)
	}
}

// TestCommitErrorsReachClients drives the two outcomes of a failed commit
// through a real group: a commit on a follower (raft.ErrNotLeader: not
// logged) is not_leader; a submission to a leader whose followers are
// gone is appended to its log and then lost with the leadership
// (raft.ErrLeadershipLost after the lease timeout): the client hears
// unavailable (503, may have been committed), not not_leader.
func TestCommitErrorsReachClients(t *testing.T) {
	// A long lease, so the submission reaches the leader before it steps
	// down, however slowly this machine stops the followers.
	g := startGroup(t, 3, func(c *ha.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 2500*time.Millisecond
	})
	l := g.leader(30 * time.Second)
	submit(t, l, 1)
	for _, m := range g.members {
		if m == l {
			continue
		}
		j := spec.Job{ID: 1 << 40, JobSpec: js("x"), State: spec.StatePending}
		if err := m.g.Apply(context.Background(), []*spec.Job{&j}, nil, 0); !errors.Is(err, spec.ErrNotLeader) {
			t.Errorf("a commit on follower %s: %v; want not_leader", m.id, err)
		}
	}
	for _, m := range g.members {
		if m != l {
			m.g.Close() // its Raft traffic ends here; m.stop finishes at cleanup
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := l.client().Submit(ctx, api.SubmitRequest{Job: js("lost")})
	if !errors.Is(err, spec.ErrUnavailable) || errors.Is(err, spec.ErrNotLeader) {
		t.Errorf("a submission whose commit lost the leadership: %v; want unavailable (may have been committed)", err)
	}
}

// A follower reloads its view of the state only while it is read: with
// no reader it spends nothing on it (the view stays as it was), and the
// first read after the quiet spell waits for a refresh and sees every
// committed job. Failed before the change (the view was reloaded every
// second whether or not anyone read it).
func TestFollowerRefreshesOnRead(t *testing.T) {
	g := startGroup(t, 3, steady)
	l := g.leader(10 * time.Second)
	f := g.follower(l)
	submit(t, l, 20)
	waitFor(t, 30*time.Second, "follower's state.db has the 20 jobs", func() bool { return len(replicaJobs(t, f)) == 20 })
	time.Sleep(2 * time.Second) // two refresh periods of the old ticker
	view, err := f.ctrl.ListJobs(context.Background(), controller.JobFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(view) != 0 {
		t.Errorf("a follower nobody read reloaded its view (%d jobs); want it left as it was (0)", len(view))
	}
	jobs, err := f.client().Jobs(context.Background(), api.JobFilter{All: true})
	if err != nil || len(jobs) != 20 {
		t.Fatalf("first read of the follower: %d jobs, %v; want all 20", len(jobs), err)
	}
	// Reads keep the view fresh (within about refreshMin).
	more := submit(t, l, 5)
	waitFor(t, 30*time.Second, "follower's view has the 5 new jobs", func() bool {
		jobs, err := f.client().Jobs(context.Background(), api.JobFilter{All: true})
		return err == nil && len(jobs) == 25 && jobs[24].ID == more[4]
	})
}

// TestGroupConfigReplicated: a configuration the leader commits reaches
// every member's OnConfig and GroupConfig; a follower cannot commit one
// (it names the leader); a member wiped and caught up from a snapshot
// gets it from the snapshot.
func TestGroupConfigReplicated(t *testing.T) {
	var mu sync.Mutex
	heard := map[string][]string{}
	tune := func(c *ha.Config) {
		// steady: a replication test, no failover; the full run of
		// b2d3cfc (load 25) deposed the leader while one member was
		// wiped ("leadership lost while committing log").
		steady(c)
		c.SnapshotThreshold, c.TrailingLogs, c.SnapshotInterval = 16, 4, 50*time.Millisecond
		id := c.ID
		c.OnConfig = func(data []byte) {
			mu.Lock()
			heard[id] = append(heard[id], string(data))
			mu.Unlock()
		}
	}
	lastHeard := func(id string) string {
		mu.Lock()
		defer mu.Unlock()
		if h := heard[id]; len(h) > 0 {
			return h[len(h)-1]
		}
		return ""
	}
	g := startGroup(t, 3, tune)
	l := g.leader(10 * time.Second)
	f := g.follower(l)
	err := f.g.CommitConfig([]byte(`{"v":0}`))
	if !errors.Is(err, spec.ErrNotLeader) || !strings.Contains(err.Error(), "reload there") {
		t.Errorf("a follower commits a configuration: %v; want not_leader saying to reload on the leader", err)
	}
	want := `{"Partitions":[{"Name":"extra"}]}`
	if err := l.g.CommitConfig([]byte(want)); err != nil {
		t.Fatal(err)
	}
	for _, m := range g.members {
		waitFor(t, 10*time.Second, "member "+m.id+" hears the configuration", func() bool { return lastHeard(m.id) == want })
		if got := string(m.g.GroupConfig()); got != want {
			t.Errorf("member %s's GroupConfig %q; want %q", m.id, got, want)
		}
	}

	// Wiped and caught up from a snapshot taken after the entry.
	wipe(t, l, f, 40)
	mu.Lock()
	delete(heard, f.id)
	mu.Unlock()
	f.start()
	waitFor(t, 15*time.Second, "the wiped member hears the configuration from the snapshot", func() bool { return lastHeard(f.id) == want })
	if got := string(f.g.GroupConfig()); got != want {
		t.Errorf("the wiped member's GroupConfig %q; want %q", got, want)
	}
	if len(snapshots(f)) == 0 {
		t.Error("the wiped member caught up without installing a snapshot; the test no longer shows the snapshot carrying the configuration")
	}
}

// TestGroupDeleteJobs: the leader's purge of jobs (controller.Purger)
// goes through the log into every member's state.db.
func TestGroupDeleteJobs(t *testing.T) {
	g := startGroup(t, 3, steady)
	l := g.leader(10 * time.Second)
	ids := submit(t, l, 4)
	if err := l.g.DeleteJobs(context.Background(), ids[:2]); err != nil {
		t.Fatal(err)
	}
	for _, m := range g.members {
		waitFor(t, 10*time.Second, "member "+m.id+" without the purged jobs", func() bool {
			have := replicaJobs(t, m)
			_, a := have[ids[0]]
			_, b := have[ids[1]]
			_, c := have[ids[2]]
			return !a && !b && c
		})
	}
}

// GET /v1/controllers, as the leader answers it, shows a member its
// heartbeats cannot reach as unreachable (with its last contact), not as
// a follower, and as a follower again once it is back; a member's own
// commit index is never below what it applied (after a restart raft
// learns the commit index from the leader's next message). Issue 25:
// gpuq controllers showed a killed member as "follower, TERM 0" and a
// restarted one with COMMIT 0.
func TestControllersShowUnreachableMember(t *testing.T) {
	g := startGroup(t, 3, nil)
	l := g.leader(10 * time.Second)
	submit(t, l, 3)
	f := g.follower(l)
	f.stop()
	state := func(id string) (api.ControllerMember, bool) {
		res, err := l.g.Controllers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Members {
			if m.ID == id {
				return m, true
			}
		}
		return api.ControllerMember{}, false
	}
	waitFor(t, 15*time.Second, "the stopped member shown unreachable", func() bool {
		m, ok := state(f.id)
		return ok && m.State == "unreachable"
	})
	if m, _ := state(f.id); m.LastContact == "" {
		t.Errorf("unreachable member %s shows no last contact", f.id)
	}
	f.start()
	waitFor(t, 15*time.Second, "the restarted member a follower again", func() bool {
		m, ok := state(f.id)
		return ok && m.State == "follower"
	})
	// The leader hears the restarted member before it has replayed its
	// log: its own row shows applied 0 until then (a full run saw it).
	var own api.ControllerMember
	waitFor(t, 15*time.Second, "the restarted member's own row with its log applied", func() bool {
		res, err := f.g.Controllers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Members {
			if m.ID == f.id {
				own = m
			}
		}
		return own.AppliedIndex > 0
	})
	if own.CommitIndex < own.AppliedIndex {
		t.Errorf("restarted member's own row: commit %d applied %d; want commit >= applied > 0", own.CommitIndex, own.AppliedIndex)
	}
}
