// Package ha runs a controller as one member of a Raft group
// (github.com/hashicorp/raft): every commit of the owner loop is a log
// entry that every member's FSM applies to its own state.db, accounting
// writes are entries too, snapshots are SQLite copies of both databases,
// and only the leader's controller schedules and dispatches. See
// docs/ha.md.
package ha

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// Peer is one member of the group.
type Peer struct {
	ID string `json:"id"`
	// Raft is host:port of its Raft traffic (mutual TLS).
	Raft string `json:"raft"`
	// API is the base URL of its API (https://host:port): the leader hint
	// followers give clients.
	API string `json:"api"`
}

// Config is one member's [ha] section, resolved.
type Config struct {
	ID string
	// RaftListen is where this member accepts Raft traffic; its address in
	// Peers is what the others dial.
	RaftListen string
	Peers      []Peer
	// Join: start without bootstrapping a group; wait to be added
	// (POST /v1/controllers on the leader).
	Join bool
	// Dir holds raft.db and the snapshots (<state_dir>/raft).
	Dir string

	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// ApplyTimeout bounds one commit's wait for a majority.
	ApplyTimeout time.Duration
	// SnapshotThreshold is how many entries since the last snapshot make
	// a new one; TrailingLogs how many stay after it (for slow followers).
	SnapshotThreshold, TrailingLogs uint64
	SnapshotInterval                time.Duration

	// ServerTLS and ClientTLS are the Raft traffic's mutual TLS
	// (auth.CA.MemberTLS).
	ServerTLS, ClientTLS *tls.Config
	// Revocations is the daemon's revocation state (the API server's):
	// a member certificate it revokes is refused, and its connections
	// closed (nil: none revoked).
	Revocations *auth.Revocations
	Log         *slog.Logger
	// Observe is told each commit's wait (nil: not measured).
	Observe func(d time.Duration)
	// OnConfig hears of each configuration the group commits (CommitConfig)
	// or a snapshot brings, as that entry's bytes. It runs on raft's FSM
	// goroutine and must not wait for the controller.
	OnConfig func(data []byte)
	// InitialConfig, when the group has committed no configuration yet,
	// gives the one a newly elected leader commits (its own gpud.toml), so
	// the group runs one configuration from its first election on.
	InitialConfig func() ([]byte, error)
}

// Defaults for Config's zero fields: on a LAN, a dead leader is noticed
// within 1-3 heartbeat timeouts (a follower's timer, random in [1, 2]
// timeouts, fires again when it last heard the leader less than one
// ago; and a follower that still hears nobody else's leader rejects a
// pre-vote, so the slower of two followers decides) and replaced within
// an election timeout more. 500 ms puts the first acknowledgement after a
// leader's link cut at about 1.3 s (1 s: about 2.5 s, up to 3.8 s; issue
// 25, docs/ha.md "The chaos suite"); Raft's heartbeats go every 50 ms.
// The lease is below the heartbeat timeout, so a leader cut off from the
// majority steps down (and stops dispatching) before the others can
// start an election.
const (
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 400 * time.Millisecond
	DefaultApplyTimeout       = 10 * time.Second
	DefaultSnapshotThreshold  = 8192
	DefaultTrailingLogs       = 10240
	DefaultSnapshotInterval   = 2 * time.Minute
)

// Member is the controller a group drives (*controller.Controller).
type Member interface {
	Lead(ctx context.Context) error
	Follow(ctx context.Context) error
	Refresh(ctx context.Context) error
}

// Group is this member's Raft node and the replicated stores around it.
type Group struct {
	cfg   Config
	log   *slog.Logger
	r     *raft.Raft
	fsm   *fsm
	logs  *logStore
	trans *raft.NetworkTransport
	state *store.Store
	acct  Accounting
	notes chan bool

	// leading is true from the moment Lead returned until leadership
	// is lost: the server's gate (Leader) reads it.
	mu      sync.Mutex
	leading bool
	// unreachable holds the members this leader's heartbeats fail to
	// reach, with their last contact (watchPeers; guarded by mu).
	unreachable map[string]time.Time
	observer    *raft.Observer
	watchDone   chan struct{}
	stopWatch   sync.Once
	watchWG     sync.WaitGroup

	// A follower's view (Run, ReadReplica): the applied count it was last
	// refreshed at, when it was last read (unix ns), and reads' requests
	// for a refresh.
	seen      atomic.Uint64
	lastRead  atomic.Int64
	refreshes chan chan struct{}
}

// Open starts this member's Raft node over state and acct (this member's
// own databases). A member with no Raft state yet bootstraps the group
// from Peers (every initial member does, with the same list), unless Join.
func Open(cfg Config, state *store.Store, acct Accounting) (*Group, error) {
	cfg.defaults()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create raft directory: %w", err)
	}
	self, ok := cfg.peer(cfg.ID)
	if !ok && !cfg.Join {
		return nil, fmt.Errorf("[ha] id %q is not in [ha] peers; list every member (this one included), or set join = true to be added later", cfg.ID)
	}
	if !ok {
		self = Peer{ID: cfg.ID, Raft: cfg.RaftListen}
	}
	f := &fsm{log: cfg.Log, state: state, acct: acct, dir: filepath.Join(cfg.Dir, "snapwork"), apis: map[string]string{}, onConfig: cfg.OnConfig}
	apis := map[string]string{}
	for _, p := range cfg.Peers {
		apis[p.ID] = p.API
	}
	f.setAPIs(apis)
	os.RemoveAll(f.dir) // scratch of a snapshot cut short

	logs, err := openLogStore(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return nil, err
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: slogWriter{cfg.Log}})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog)
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("open raft snapshots in %s: %w", cfg.Dir, err)
	}
	stream, err := newTLSStream(cfg.RaftListen, self.Raft, cfg.ServerTLS, cfg.ClientTLS, cfg.Revocations, cfg.Log)
	if err != nil {
		logs.Close()
		return nil, err
	}
	trans := raft.NewNetworkTransportWithLogger(stream, 3, 5*time.Second, hlog)

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.Logger = hlog
	notes := make(chan bool, 16)
	rc.NotifyCh = notes
	if err := raft.ValidateConfig(rc); err != nil {
		trans.Close()
		logs.Close()
		return nil, fmt.Errorf("[ha] timeouts: %w", err)
	}
	cached, err := raft.NewLogCache(1024, logs)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, err
	}
	has, err := raft.HasExistingState(cached, logs, snaps)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, err
	}
	if err := f.startFrom(has, snaps); err != nil {
		trans.Close()
		logs.Close()
		return nil, err
	}
	if !has && !cfg.Join {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Raft), Suffrage: raft.Voter})
		}
		if err := raft.BootstrapCluster(rc, cached, logs, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			trans.Close()
			logs.Close()
			return nil, fmt.Errorf("bootstrap the HA group: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, f, cached, logs, snaps, trans)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	g := &Group{cfg: cfg, log: cfg.Log, r: r, fsm: f, logs: logs, trans: trans, state: state, acct: acct, notes: notes,
		refreshes: make(chan chan struct{})}
	g.watchPeers()
	return g, nil
}

// watchPeers notes, on the leader, which members its heartbeats fail to
// reach (raft's heartbeat observations), so that GET /v1/controllers
// shows a member that is down or cut off as unreachable rather than as a
// follower. Close stops it.
func (g *Group) watchPeers() {
	ch := make(chan raft.Observation, 64)
	g.unreachable = map[string]time.Time{}
	g.observer = raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	g.r.RegisterObserver(g.observer)
	g.watchDone = make(chan struct{})
	g.watchWG.Go(func() {
		for {
			select {
			case <-g.watchDone:
				return
			case o := <-ch:
				g.mu.Lock()
				switch d := o.Data.(type) {
				case raft.FailedHeartbeatObservation:
					if _, ok := g.unreachable[string(d.PeerID)]; !ok {
						g.unreachable[string(d.PeerID)] = d.LastContact
					}
				case raft.ResumedHeartbeatObservation:
					delete(g.unreachable, string(d.PeerID))
				case raft.LeaderObservation:
					clear(g.unreachable) // another leader's view starts afresh
				}
				g.mu.Unlock()
			}
		}
	})
}

func (c *Config) defaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Revocations == nil {
		c.Revocations = auth.NewRevocations(nil)
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	set(&c.ElectionTimeout, DefaultElectionTimeout)
	set(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	set(&c.ApplyTimeout, DefaultApplyTimeout)
	set(&c.SnapshotInterval, DefaultSnapshotInterval)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
}

func (c *Config) peer(id string) (Peer, bool) {
	for _, p := range c.Peers {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}

// Close stops the Raft node (a leader hands nothing over: the others elect
// one after the heartbeat timeout) and closes raft.db.
func (g *Group) Close() error {
	g.stopWatch.Do(func() {
		g.r.DeregisterObserver(g.observer)
		close(g.watchDone)
	})
	g.watchWG.Wait()
	err := g.r.Shutdown().Error()
	g.trans.Close()
	return errors.Join(err, g.logs.Close())
}

// A follower's view of the state (its controller's memory, which answers
// reads) is reloaded whole from state.db, so it is refreshed only while
// someone reads it: at most every refreshMin, and at most a tenth of the
// time (a follower with 100,000 jobs spends its CPU on neither more nor
// less than that, and its reads lag by about as much), for readWindow
// after the last read. The first read after a quiet spell waits for a
// refresh (ReadReplica). A follower nobody reads spends nothing on it.
const (
	refreshMin = time.Second
	readWindow = 10 * time.Second
	// readWaitMax bounds a read's wait for a refresh.
	readWaitMax = 10 * time.Second
)

// Run drives m until ctx ends: Lead when this member becomes leader (after
// a barrier, so state.db holds every committed entry), Follow the moment
// it stops being leader, and, while following, Refresh after entries were
// applied while reads come (see refreshMin).
func (g *Group) Run(ctx context.Context, m Member) error {
	t := time.NewTicker(refreshMin / 4)
	defer t.Stop()
	var next time.Time
	refresh := func() {
		if g.isLeading() {
			return
		}
		n := g.fsm.applied.Load()
		if n == g.seen.Load() {
			return
		}
		start := time.Now()
		if err := m.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("reloading this follower's view of the state failed; reads may be stale until the next", "err", err)
		}
		g.seen.Store(n)
		next = time.Now().Add(max(refreshMin, 10*time.Since(start)))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case leader := <-g.notes:
			// Only the latest note matters.
			for more := true; more; {
				select {
				case leader = <-g.notes:
				default:
					more = false
				}
			}
			if leader {
				g.lead(ctx, m)
			} else {
				g.follow(ctx, m)
			}
		case done := <-g.refreshes:
			refresh()
			close(done)
		case now := <-t.C:
			if now.Before(next) || now.Sub(time.Unix(0, g.lastRead.Load())) > readWindow {
				continue
			}
			refresh()
		}
	}
}

// ReadReplica is called before a follower answers a read from its view
// of the state. The view is kept fresh while reads come (see refreshMin);
// the first read after a quiet spell, which finds it older, waits (up to
// readWaitMax, or until ctx ends) for a refresh.
func (g *Group) ReadReplica(ctx context.Context) {
	now := time.Now()
	prev := time.Unix(0, g.lastRead.Swap(now.UnixNano()))
	if now.Sub(prev) < readWindow || g.isLeading() || g.fsm.applied.Load() == g.seen.Load() {
		return
	}
	done := make(chan struct{})
	tm := time.NewTimer(readWaitMax)
	defer tm.Stop()
	select {
	case g.refreshes <- done:
	case <-ctx.Done():
		return
	case <-tm.C:
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-tm.C:
	}
}

func (g *Group) lead(ctx context.Context, m Member) {
	start := time.Now()
	if err := g.r.Barrier(g.cfg.ApplyTimeout).Error(); err != nil {
		// A leader that cannot lead must not keep the others from it.
		g.log.Warn("elected, but the barrier failed; handing the leadership on", "err", err)
		if g.r.State() == raft.Leader {
			g.r.LeadershipTransfer()
		}
		return
	}
	if g.r.State() != raft.Leader {
		return
	}
	if err := m.Lead(ctx); err != nil {
		g.log.Error("elected, but the controller could not take over; stepping down", "err", err)
		g.r.LeadershipTransfer()
		return
	}
	g.mu.Lock()
	g.leading = true
	g.mu.Unlock()
	g.log.Info("HA member is the leader", "id", g.cfg.ID, "term", g.r.CurrentTerm(), "took", time.Since(start))
	if g.cfg.InitialConfig != nil && g.fsm.groupConfig() == nil {
		data, err := g.cfg.InitialConfig()
		if err == nil {
			err = g.CommitConfig(data)
		}
		if err != nil {
			g.log.Warn("the group has no configuration yet and this leader could not commit its own; each member runs its gpud.toml until a reload on the leader", "err", err)
		}
	}
}

func (g *Group) follow(ctx context.Context, m Member) {
	g.mu.Lock()
	g.leading = false
	g.mu.Unlock()
	if err := m.Follow(ctx); err != nil && ctx.Err() == nil {
		g.log.Error("stopping the controller's scheduling failed", "err", err)
	}
	g.log.Info("HA member follows", "id", g.cfg.ID, "leader", g.leaderID())
}

func (g *Group) isLeading() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leading
}

func (g *Group) leaderID() string {
	_, id := g.r.LeaderWithID()
	return string(id)
}

// Leader says whether this member is the leader and serves writes and the
// node protocol (elected, caught up, controller in charge, and Raft still
// in the Leader state, which it leaves LeaderLeaseTimeout after losing
// contact with the majority), and otherwise the leader's API address
// ("" during an election).
func (g *Group) Leader() (bool, string) {
	if g.isLeading() && g.r.State() == raft.Leader {
		return true, ""
	}
	return false, g.fsm.apiOf(g.leaderID())
}

// WaitLeader waits, at most max or until ctx ends, while this member is
// the newly elected leader still taking charge (barrier, reload: Lead),
// and then says what Leader says: a call held here is served the moment
// it is in charge (server.WithHA's gate), instead of being sent away to
// come back after the client's backoff. A member that knows no leader
// answers at once: it may be cut off from the others, and the client
// should try them.
func (g *Group) WaitLeader(ctx context.Context, max time.Duration) (bool, string) {
	deadline := time.Now().Add(max)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		leading, leader := g.Leader()
		taking := !leading && g.r.State() == raft.Leader && g.leaderID() == g.cfg.ID
		if !taking || time.Now().After(deadline) {
			return leading, leader
		}
		select {
		case <-ctx.Done():
			return g.Leader()
		case <-t.C:
		}
	}
}

// apply commits c through the log and returns its FSM result.
func (g *Group) apply(c *command) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode HA log entry: %w", err)
	}
	return g.applyData(data)
}

// applyData commits one encoded entry.
func (g *Group) applyData(data []byte) error {
	start := time.Now()
	fut := g.r.Apply(data, g.cfg.ApplyTimeout)
	if err := fut.Error(); err != nil {
		if !mayHaveCommitted(err) {
			return commitError(err)
		}
		// The entry may still commit. The controller reloads state.db
		// after this error: a barrier first makes state.db hold the
		// entry if it did, so memory and disk agree; a leader that
		// cannot even do that steps aside.
		if berr := g.r.Barrier(g.cfg.ApplyTimeout).Error(); berr != nil && g.r.State() == raft.Leader {
			g.log.Error("a commit and the barrier after it failed; handing the leadership on", "err", err, "barrier", berr)
			g.r.LeadershipTransfer()
		}
		return commitError(err)
	}
	if g.cfg.Observe != nil {
		g.cfg.Observe(time.Since(start))
	}
	if err, ok := fut.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// mayHaveCommitted says whether an entry whose raft.Apply failed with err
// may still be committed (and applied by every member). raft refuses an
// entry before appending it to the log with ErrNotLeader (this member is
// not the leader, or is stepping down), ErrLeadershipTransferInProgress
// and ErrEnqueueTimeout (the entry never reached raft's loop): nothing
// was logged, a retry at the leader is safe. ErrLeadershipLost comes
// after the entry was appended and perhaps replicated: a majority may
// hold it and the next leader commit it. So may any other error
// (ErrRaftShutdown during a commit, a log store failure).
func mayHaveCommitted(err error) bool {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrEnqueueTimeout):
		return false
	}
	return true
}

// commitError is what a client hears of a failed commit: not_leader (421,
// retried by clients at the leader) when nothing was logged, unavailable
// (503: the change may have been committed; check before repeating it)
// otherwise.
func commitError(err error) error {
	if !mayHaveCommitted(err) {
		return spec.Errorf(spec.ErrNotLeader, "this controller is not (or no longer) the leader of its HA group and did not log the change (%v); retry at the leader", err)
	}
	return spec.Errorf(spec.ErrUnavailable, "the HA group lost or could not confirm this commit (%v): the change may have been committed; check (gpuq, squeue) before repeating it", err)
}

// CommitConfig makes data (config.Controller as JSON) the group's
// configuration: every member's OnConfig hears of it once it is on a
// majority. Only the leader can; another member's error names the leader.
func (g *Group) CommitConfig(data []byte) error {
	if !g.isLeading() {
		leader := g.leaderID()
		if leader == "" {
			leader = "none elected now"
		}
		return spec.Errorf(spec.ErrNotLeader, "this controller follows (leader: %s); the group's configuration is the leader's: reload there (gpuq reconfigure or SIGHUP to the leader), its gpud.toml becomes every member's", leader)
	}
	return g.apply(&command{Kind: kindConfig, Config: data})
}

// GroupConfig is the newest configuration the group committed (nil: none
// yet; each member runs its own gpud.toml).
func (g *Group) GroupConfig() []byte { return g.fsm.groupConfig() }

// DeleteJobs purges ended jobs from every member's state.db, through
// the log (controller.Purger).
func (g *Group) DeleteJobs(_ context.Context, ids []spec.JobID) error {
	return g.apply(&command{Kind: kindDelete, Deleted: ids})
}

// ApplyAdmin commits a change of the admin's live state through the log
// (controller.AdminStore).
func (g *Group) ApplyAdmin(_ context.Context, recs []spec.AdminRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return g.apply(&command{Kind: kindAdmin, Admin: recs})
}

// LoadAdmin reads the admin's live state from this member's state.db.
func (g *Group) LoadAdmin(ctx context.Context) ([]spec.AdminRecord, error) {
	return g.state.LoadAdmin(ctx)
}

// Load reads this member's state.db (the controller's Store).
func (g *Group) Load(ctx context.Context) ([]spec.Job, []spec.Node, spec.JobID, error) {
	return g.state.Load(ctx)
}

// Apply commits one owner-loop commit through the log: it returns once a
// majority has the entry and this member's FSM applied it to state.db
// (the controller's Store).
func (g *Group) Apply(_ context.Context, jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID) error {
	if len(jobs) == 0 && len(nodes) == 0 && nextJobID == 0 {
		return nil
	}
	// The leader encodes the rows once; every member writes them as
	// they are (entry.go).
	rows, err := g.state.Encode(jobs, nodes, nextJobID)
	if err != nil {
		return err
	}
	return g.applyData(appendRows(nil, rows))
}

// RecordJobs replicates ended jobs into every member's accounting.db (the
// controller's Recorder; idempotent by job and attempt, as accounting is).
func (g *Group) RecordJobs(_ context.Context, jobs []spec.Job) error {
	return g.apply(&command{Kind: kindRecords, Records: jobs})
}

// RecordNodeEvents replicates node availability events.
func (g *Group) RecordNodeEvents(_ context.Context, evs []spec.NodeEvent) error {
	return g.apply(&command{Kind: kindEvents, Events: evs})
}

// RecordReservations replicates reservation windows (the controller's
// ReservationRecorder).
func (g *Group) RecordReservations(_ context.Context, recs []spec.ResvRecord) error {
	return g.apply(&command{Kind: kindResv, Resvs: recs})
}

// RecordUsageSamples replicates the nodes' usage samples (the server's
// UsageRecorder).
func (g *Group) RecordUsageSamples(_ context.Context, samples []accounting.UsageSample) error {
	return g.apply(&command{Kind: kindUsage, Usage: samples})
}

// RecordedTerminal reads this member's accounting.db (RecordChecker).
func (g *Group) RecordedTerminal(ctx context.Context, ids []spec.JobID) (map[spec.JobID]int, error) {
	return g.acct.RecordedTerminal(ctx, ids)
}

// Controllers lists the members as this one sees them. Term and indexes
// are this member's own; for the others they are known only to them
// (ask each: GET /v1/controllers at its API address).
func (g *Group) Controllers(context.Context) (api.ControllersResponse, error) {
	fut := g.r.GetConfiguration()
	if err := fut.Error(); err != nil {
		return api.ControllersResponse{}, spec.Errorf(spec.ErrUnavailable, "read the HA group's members: %v", err)
	}
	leaderAddr, leaderID := g.r.LeaderWithID()
	_ = leaderAddr
	leading := g.r.State() == raft.Leader
	resp := api.ControllersResponse{Leader: string(leaderID), Self: g.cfg.ID}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range fut.Configuration().Servers {
		m := api.ControllerMember{ID: string(s.ID), RaftAddress: string(s.Address), APIAddress: g.fsm.apiOf(string(s.ID)),
			Voter: s.Suffrage == raft.Voter, State: "follower"}
		if s.ID == leaderID {
			m.State = "leader"
		}
		if lc, ok := g.unreachable[string(s.ID)]; ok && leading && s.ID != leaderID {
			// The leader's heartbeats to it fail: down or cut off.
			m.State = "unreachable"
			if !lc.IsZero() {
				m.LastContact = lc.UTC().Format(time.RFC3339Nano)
			}
		}
		if string(s.ID) == g.cfg.ID {
			m.State = stateName(g.r.State())
			// After a restart raft learns the commit index from the
			// leader's next message; what this member applied was
			// committed, so the commit index is at least that.
			m.Term, m.AppliedIndex = g.r.CurrentTerm(), g.r.AppliedIndex()
			m.CommitIndex = max(g.r.CommitIndex(), m.AppliedIndex)
			if lc := g.r.LastContact(); !lc.IsZero() && g.r.State() != raft.Leader {
				m.LastContact = lc.UTC().Format(time.RFC3339Nano)
			}
		}
		resp.Members = append(resp.Members, m)
	}
	return resp, nil
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		return "follower"
	}
	return "shutdown"
}

// AddMember adds p as a voter (leader only): it catches up from a
// snapshot and the log, then votes.
func (g *Group) AddMember(_ context.Context, m api.ControllerMember) error {
	p := Peer{ID: m.ID, Raft: m.RaftAddress, API: m.APIAddress}
	if ok, _ := g.Leader(); !ok {
		return spec.Errorf(spec.ErrNotLeader, "members are added at the leader")
	}
	if p.ID == "" || p.Raft == "" || p.API == "" {
		return spec.Errorf(spec.ErrInvalid, "a member needs id, raft_address and api_address")
	}
	if err := g.apply(&command{Kind: kindMember, Member: &p}); err != nil {
		return err
	}
	if err := g.r.AddVoter(raft.ServerID(p.ID), raft.ServerAddress(p.Raft), 0, g.cfg.ApplyTimeout).Error(); err != nil {
		return spec.Errorf(spec.ErrUnavailable, "add HA member %s: %v", p.ID, err)
	}
	return nil
}

// RemoveMember removes member id (leader only; removing the leader itself
// makes the others elect a new one).
func (g *Group) RemoveMember(_ context.Context, id string) error {
	if ok, _ := g.Leader(); !ok {
		return spec.Errorf(spec.ErrNotLeader, "members are removed at the leader")
	}
	fut := g.r.GetConfiguration()
	if err := fut.Error(); err != nil {
		return spec.Errorf(spec.ErrUnavailable, "read the HA group's members: %v", err)
	}
	found := false
	for _, s := range fut.Configuration().Servers {
		found = found || string(s.ID) == id
	}
	if !found {
		return spec.Errorf(spec.ErrNotFound, "no HA member %q", id)
	}
	if err := g.r.RemoveServer(raft.ServerID(id), 0, g.cfg.ApplyTimeout).Error(); err != nil {
		return spec.Errorf(spec.ErrUnavailable, "remove HA member %s: %v", id, err)
	}
	return nil
}

// Stats are the figures gpud/metrics exports.
type Stats struct {
	State                                         string
	Term, CommitIndex, AppliedIndex, LastLogIndex uint64
	LastContact                                   time.Time
	Leader                                        bool
}

// Stats reads the Raft node's figures now.
func (g *Group) Stats() Stats {
	leading, _ := g.Leader()
	return Stats{State: stateName(g.r.State()), Term: g.r.CurrentTerm(), CommitIndex: g.r.CommitIndex(),
		AppliedIndex: g.r.AppliedIndex(), LastLogIndex: g.r.LastIndex(), LastContact: g.r.LastContact(), Leader: leading}
}

// slogWriter carries raft's log lines into the daemon's log.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Warn("raft", "msg", string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = slogWriter{}
