package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/ha"
	"github.com/gpud/gpud/gpud/metrics"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/store"
)

var (
	_ controller.Store         = (*ha.Group)(nil)
	_ controller.Purger        = (*ha.Group)(nil)
	_ controller.Purger        = (*store.Store)(nil)
	_ controller.Recorder      = (*ha.Group)(nil)
	_ controller.RecordChecker = (*ha.Group)(nil)
	_ server.UsageRecorder     = (*ha.Group)(nil)
	_ server.HA                = (*ha.Group)(nil)
	_ ha.Member                = (*controller.Controller)(nil)
	_ ha.Accounting            = (*accounting.DB)(nil)
)

// haMember is this controller's part in an HA group ([ha]); nil when it
// runs alone, and then every method gives what a single controller uses.
type haMember struct {
	g *ha.Group
	// configs carries the newest configuration the group committed (or a
	// snapshot brought) to followConfig; a newer one replaces one not yet
	// taken.
	configs chan []byte
	// applied is the configuration this member runs, as the log's bytes:
	// its own reload's entry coming back is not applied twice.
	applied atomic.Pointer[[]byte]
}

// startHA starts this controller's Raft member when [ha] is set: its log
// in <state_dir>/raft, its Raft traffic on raft_listen under mutual TLS
// with member certificates of the cluster CA in <state_dir>/tls (made on
// the first member's first start; every member must hold the same one).
//
// The configuration is the group's: initial gives the one a leader
// commits when the group has none yet (its own gpud.toml).
func startHA(cfg config.Controller, st *store.Store, acct *accounting.DB, mets *metrics.Controller, rev *auth.Revocations, log *slog.Logger, initial func() config.Controller) (*haMember, error) {
	h := cfg.HA
	if !h.Enabled() {
		return nil, nil
	}
	m := &haMember{configs: make(chan []byte, 1)}
	// The CA, token key and join token exist from here on (remoteAuth
	// runs again to serve listen_tcp; it finds them).
	if _, _, _, err := remoteAuth(cfg, log); err != nil {
		return nil, err
	}
	dir := cfg.TLSDir()
	ca, err := auth.LoadCA(auth.Files{CA: filepath.Join(dir, auth.CAFile), CAKey: filepath.Join(dir, auth.CAKeyFile)}, time.Now)
	if err != nil {
		return nil, fmt.Errorf("[ha]: %w; every member needs the cluster CA in %s (copy it from the first member)", err, dir)
	}
	serverTLS, clientTLS, err := ca.MemberTLS(h.ID)
	if err != nil {
		return nil, err
	}
	var peers []ha.Peer
	for _, p := range h.Peers {
		peers = append(peers, ha.Peer{ID: p.ID, Raft: p.Raft, API: p.API})
	}
	var group atomic.Pointer[ha.Group]
	observe := mets.AddRaft(func() metrics.RaftStats {
		g := group.Load()
		if g == nil {
			return metrics.RaftStats{State: "shutdown"}
		}
		s := g.Stats()
		return metrics.RaftStats{State: s.State, Term: s.Term, CommitIndex: s.CommitIndex, AppliedIndex: s.AppliedIndex,
			LastLogIndex: s.LastLogIndex, LastContact: s.LastContact}
	})
	g, err := ha.Open(ha.Config{
		ID: h.ID, RaftListen: h.RaftListen, Peers: peers, Join: h.Join,
		Dir:              filepath.Join(cfg.Controller.StateDir, "raft"),
		HeartbeatTimeout: h.HeartbeatTimeout.Std(), ElectionTimeout: h.ElectionTimeout.Std(),
		LeaderLeaseTimeout: h.LeaderLeaseTimeout.Std(), ApplyTimeout: h.ApplyTimeout.Std(),
		SnapshotThreshold: h.SnapshotThreshold, TrailingLogs: h.TrailingLogs, SnapshotInterval: h.SnapshotInterval.Std(),
		ServerTLS: serverTLS, ClientTLS: clientTLS, Revocations: rev, Log: log.With("component", "ha"), Observe: observe,
		OnConfig: m.heardConfig,
		InitialConfig: func() ([]byte, error) {
			data, err := json.Marshal(initial())
			if err == nil {
				m.applied.Store(&data)
			}
			return data, err
		},
	}, st, acct)
	if err != nil {
		return nil, err
	}
	group.Store(g)
	m.g = g
	// The member certificate is made anew at every start; its serial is
	// what [auth] revoked_node_certs takes to shut this member out of
	// the group's Raft port.
	log.Info("HA member started; the controller follows until it is elected", "id", h.ID, "raft_listen", h.RaftListen, "peers", len(peers),
		"certificate_serial", memberSerial(serverTLS))
	return m, nil
}

// heardConfig passes a configuration the group committed to followConfig
// without waiting (it runs on raft's FSM goroutine).
func (m *haMember) heardConfig(data []byte) {
	for {
		select {
		case m.configs <- data:
			return
		default:
		}
		select {
		case <-m.configs: // an older one not yet applied
		default:
		}
	}
}

// commitConfig makes c, just loaded from this member's gpud.toml, the
// group's configuration; only the leader can (a follower's error names
// the leader). Alone it does nothing.
func (m *haMember) commitConfig(c config.Controller) error {
	if m == nil {
		return nil
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode the configuration for the HA log: %w", err)
	}
	prev := m.applied.Swap(&data)
	if err := m.g.CommitConfig(data); err != nil {
		m.applied.Store(prev)
		return err
	}
	return nil
}

// followConfig runs, until ctx ends, each configuration the group
// commits: apply gets it with this member's own settings.
func (m *haMember) followConfig(ctx context.Context, apply func(config.Controller) error, log *slog.Logger) error {
	if m == nil {
		return nil
	}
	for {
		var data []byte
		select {
		case <-ctx.Done():
			return nil
		case data = <-m.configs:
		}
		if p := m.applied.Load(); p != nil && bytes.Equal(*p, data) {
			continue // this member's own reload, already running
		}
		var gc config.Controller
		err := json.Unmarshal(data, &gc)
		if err == nil {
			err = apply(gc)
		}
		if err != nil {
			log.Error("the HA group's configuration could not be applied here; this member keeps its running one", "err", err)
			continue
		}
		m.applied.Store(&data)
	}
}

// haStoreOptions: an HA member's state.db is rebuilt from the Raft
// snapshot and log at every start, so its commits need no fsync.
func haStoreOptions(cfg config.Controller) []store.Option {
	if !cfg.HA.Enabled() {
		return nil
	}
	return []store.Option{store.Replica()}
}

// store is the controller's Store: the group's log, or state.db itself.
func (m *haMember) store(st *store.Store) controller.Store {
	if m == nil {
		return st
	}
	return m.g
}

// recorder is where ended jobs go: through the log into every member's
// accounting.db, or accounting.db itself.
func (m *haMember) recorder(acct *accounting.DB) controller.Recorder {
	if m == nil {
		return acct
	}
	return m.g
}

// usage is where the nodes' usage samples go (like recorder).
func (m *haMember) usage(acct *accounting.DB) server.UsageRecorder {
	if m == nil {
		return acct
	}
	return m.g
}

// haGroupCommitMax bounds how long a member's owner loop waits for more
// requests to join a commit (controller.WithGroupCommit): a Raft commit
// costs the group three appends, fsyncs and applies whatever it holds.
const haGroupCommitMax = 2 * time.Millisecond

// singleGroupCommitMax bounds the same wait for a single controller,
// whose commit is one SQLite transaction with its fsync: in a live burst
// (8 submitters and 1,000 agents' events) waiting up to half the last
// commit's duration, at most this, for batches smaller than the recent
// ones made 22-31 % fewer commits for the same jobs and cut the
// controller's CPU per 1,000 submissions+starts from 0.86-0.95 to
// 0.77-0.86 (five alternated pairs, docs/fleet.md "Session 16 —
// ctlsub"). A lone client never waits.
const singleGroupCommitMax = 3 * time.Millisecond

// controllerOptions: a member starts following, and group-commits; a
// single controller group-commits within singleGroupCommitMax.
func (m *haMember) controllerOptions() []controller.Option {
	if m == nil {
		return []controller.Option{controller.WithGroupCommit(singleGroupCommitMax)}
	}
	return []controller.Option{controller.WithFollower(), controller.WithGroupCommit(haGroupCommitMax)}
}

// serverOptions: a follower refuses writes and the node protocol.
func (m *haMember) serverOptions() []server.Option {
	if m == nil {
		return nil
	}
	return []server.Option{server.WithHA(m.g)}
}

// run drives the controller from the group's leadership until ctx ends.
func (m *haMember) run(ctx context.Context, ctrl *controller.Controller) error {
	if m == nil {
		return nil
	}
	return m.g.Run(ctx, ctrl)
}

// close stops the Raft member (before the stores it applies to close).
func (m *haMember) close() {
	if m != nil {
		m.g.Close() //nolint:errcheck // stopping; raft logs its own failures
	}
}

// memberSerial is the serial of the member certificate in cfg ("" when
// it cannot be read).
func memberSerial(cfg *tls.Config) string {
	if len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return ""
	}
	c, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return ""
	}
	return auth.Serial(c)
}
