package ha

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// Accounting is what the group replicates into every member's
// accounting.db (implemented by *accounting.DB): every member can answer
// reports, and a new leader has the record of every job.
type Accounting interface {
	RecordJobs(ctx context.Context, jobs []spec.Job) error
	RecordNodeEvents(ctx context.Context, evs []spec.NodeEvent) error
	RecordReservations(ctx context.Context, recs []spec.ResvRecord) error
	RecordUsageSamples(ctx context.Context, samples []accounting.UsageSample) error
	RecordedTerminal(ctx context.Context, ids []spec.JobID) (map[spec.JobID]int, error)
	Snapshot(ctx context.Context, path string) error
	Restore(ctx context.Context, path string) error
}

// Kinds of log entries.
const (
	// kindState is one commit of the owner loop: Store.Apply's arguments.
	kindState = "state"
	// kindRecords, kindEvents and kindUsage are the accounting writes.
	kindRecords = "records"
	kindEvents  = "node_events"
	kindUsage   = "usage"
	// kindResv is reservation windows for accounting.
	kindResv = "reservations"
	// kindMember notes a member's API address (added members).
	kindMember = "member"
	// kindConfig is the group's configuration (a reload on the leader):
	// config.Controller as JSON, which every member runs with its own
	// member settings (config.Controller.WithMember).
	kindConfig = "config"
	// kindDelete purges ended jobs from state.db (controller.Purger).
	kindDelete = "delete"
	// kindAdmin is a change of the admin's live state (node and
	// partition overrides, reservations: controller.AdminStore).
	kindAdmin = "admin"
)

// command is one log entry, JSON-encoded.
type command struct {
	Kind    string                   `json:"kind"`
	Jobs    []*spec.Job              `json:"jobs,omitempty"`
	Nodes   []*spec.Node             `json:"nodes,omitempty"`
	NextID  spec.JobID               `json:"next_id,omitempty"`
	Records []spec.Job               `json:"records,omitempty"`
	Events  []spec.NodeEvent         `json:"events,omitempty"`
	Usage   []accounting.UsageSample `json:"usage,omitempty"`
	Resvs   []spec.ResvRecord        `json:"resvs,omitempty"`
	Member  *Peer                    `json:"member,omitempty"`
	Config  json.RawMessage          `json:"config,omitempty"`
	Deleted []spec.JobID             `json:"deleted,omitempty"`
	Admin   []spec.AdminRecord       `json:"admin,omitempty"`
}

// fsm applies the log to this member's state.db and accounting.db.
type fsm struct {
	log   *slog.Logger
	state *store.Store
	acct  Accounting
	dir   string // scratch space for snapshots (<raft dir>/snapwork)

	// applied counts entries applied or restored; followers reload their
	// view when it moves.
	applied atomic.Uint64

	mu sync.Mutex
	// apis are the members' API addresses by id, from [ha] peers and
	// kindMember entries; snapshots carry them.
	apis map[string]string
	// config is the newest kindConfig entry's (nil: none yet), and
	// onConfig hears of each new one; snapshots carry it.
	config   []byte
	onConfig func([]byte)
}

func (f *fsm) Apply(l *raft.Log) any {
	defer f.applied.Add(1)
	if len(l.Data) > 0 && l.Data[0] == binaryMark {
		rows, err := f.decode(l)
		if err == nil {
			err = f.state.ApplyRows(context.Background(), rows)
		}
		return f.failed(l, "state", err)
	}
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		f.log.Error("HA log entry does not decode; skipping it", "index", l.Index, "err", err)
		return fmt.Errorf("decode HA log entry %d: %w", l.Index, err)
	}
	ctx := context.Background()
	var err error
	switch c.Kind {
	case kindState:
		// A commit an older gpud logged.
		err = f.state.Apply(ctx, c.Jobs, c.Nodes, c.NextID)
	case kindRecords:
		err = f.acct.RecordJobs(ctx, c.Records)
	case kindEvents:
		err = f.acct.RecordNodeEvents(ctx, c.Events)
	case kindUsage:
		err = f.acct.RecordUsageSamples(ctx, c.Usage)
	case kindResv:
		err = f.acct.RecordReservations(ctx, c.Resvs)
	case kindMember:
		if c.Member != nil {
			f.mu.Lock()
			f.apis[c.Member.ID] = c.Member.API
			f.mu.Unlock()
		}
	case kindConfig:
		f.setConfig(c.Config)
	case kindDelete:
		err = f.state.DeleteJobs(ctx, c.Deleted)
	case kindAdmin:
		err = f.state.ApplyAdmin(ctx, c.Admin)
	default:
		err = fmt.Errorf("HA log entry %d has unknown kind %q; is a newer gpud in the group?", l.Index, c.Kind)
	}
	return f.failed(l, c.Kind, err)
}

// decode reads a binary entry (binaryMark first).
func (f *fsm) decode(l *raft.Log) (*store.Rows, error) {
	if len(l.Data) < 2 || l.Data[1] != binState {
		return nil, fmt.Errorf("HA log entry %d is binary of an unknown kind; is a newer gpud in the group?", l.Index)
	}
	rows, err := decodeRows(l.Data[2:])
	if err != nil {
		return nil, fmt.Errorf("decode HA log entry %d: %w", l.Index, err)
	}
	return rows, nil
}

// failed logs an entry's failed apply and returns err (nil: applied).
func (f *fsm) failed(l *raft.Log, kind string, err error) error {
	if err != nil {
		// The entry is committed: this member's copy now lacks it. The
		// leader's owner loop sees the error (and reloads); a follower
		// logs it, and catches up at the next snapshot it installs.
		f.log.Error("applying an HA log entry failed; this member's state.db may lag until it installs a snapshot", "index", l.Index, "kind", kind, "err", err)
	}
	return err
}

// ApplyBatch applies the entries Raft committed together (a follower
// receives up to MaxAppendEntries at once): each run of owner-loop
// commits goes to state.db in one transaction, which costs about what
// one commit alone does. Should that transaction fail, its entries are
// applied one by one, so each gets its own answer as with Apply.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var run []int
	var rows []*store.Rows
	flush := func() {
		if len(run) == 0 {
			return
		}
		switch err := f.state.ApplyRows(context.Background(), rows...); {
		case err == nil:
			f.applied.Add(uint64(len(run)))
		case len(run) == 1:
			f.applied.Add(1)
			out[run[0]] = f.failed(logs[run[0]], "state", err)
		default:
			for _, i := range run {
				out[i] = f.Apply(logs[i])
			}
		}
		run, rows = run[:0], rows[:0]
	}
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue // configuration changes: raft keeps them
		}
		if len(l.Data) > 0 && l.Data[0] == binaryMark {
			if r, err := f.decode(l); err == nil {
				run = append(run, i)
				rows = append(rows, r)
				continue
			}
		}
		flush()
		out[i] = f.Apply(l)
	}
	flush()
	return out
}

var _ raft.BatchingFSM = (*fsm)(nil)

func (f *fsm) apiOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apis[id]
}

func (f *fsm) setAPIs(m map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	maps.Copy(f.apis, m)
}

// setConfig keeps the group's configuration and tells onConfig, which
// must not wait on the owner loop (this runs on raft's FSM goroutine,
// which a leader's commit waits for).
func (f *fsm) setConfig(data []byte) {
	if len(data) == 0 {
		return
	}
	f.mu.Lock()
	f.config = slices.Clone(data)
	on := f.onConfig
	f.mu.Unlock()
	if on != nil {
		on(slices.Clone(data))
	}
}

func (f *fsm) groupConfig() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.config)
}

// snapshotHeader starts a snapshot: the members' API addresses and the
// sizes of the two database copies that follow it, in this order.
type snapshotHeader struct {
	APIs       map[string]string `json:"apis"`
	Config     json.RawMessage   `json:"config,omitempty"`
	StateBytes int64             `json:"state_bytes"`
	AcctBytes  int64             `json:"acct_bytes"`
}

// Snapshot copies both databases (VACUUM INTO) while applies wait: the
// copies are what the log up to here made. Persist streams them.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	work, err := os.MkdirTemp(f.dir, "snap-")
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	s := &snapshot{work: work, state: filepath.Join(work, "state.db"), acct: filepath.Join(work, "accounting.db")}
	ctx := context.Background()
	if err := f.state.Snapshot(ctx, s.state); err != nil {
		s.Release()
		return nil, err
	}
	if err := f.acct.Snapshot(ctx, s.acct); err != nil {
		s.Release()
		return nil, err
	}
	f.mu.Lock()
	s.apis = maps.Clone(f.apis)
	s.config = slices.Clone(f.config)
	f.mu.Unlock()
	return s, nil
}

type snapshot struct {
	work, state, acct string
	apis              map[string]string
	config            []byte
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	err := s.write(sink)
	if err != nil {
		sink.Cancel() //nolint:errcheck // the write's error is the one to report
		return err
	}
	return sink.Close()
}

func (s *snapshot) write(w io.Writer) error {
	st, err := os.Stat(s.state)
	if err != nil {
		return err
	}
	at, err := os.Stat(s.acct)
	if err != nil {
		return err
	}
	hdr, err := json.Marshal(snapshotHeader{APIs: s.apis, Config: s.config, StateBytes: st.Size(), AcctBytes: at.Size()})
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := binary.Write(bw, binary.BigEndian, uint32(len(hdr))); err != nil {
		return err
	}
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	for _, p := range []string{s.state, s.acct} {
		if err := copyFile(bw, p); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func (s *snapshot) Release() { os.RemoveAll(s.work) }

// Restore replaces both databases with a snapshot's (from the leader, or
// this member's own at start), each in one transaction.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	defer f.applied.Add(1)
	br := bufio.NewReaderSize(rc, 1<<20)
	var n uint32
	if err := binary.Read(br, binary.BigEndian, &n); err != nil {
		return fmt.Errorf("read HA snapshot header: %w", err)
	}
	if n > 64<<20 {
		return fmt.Errorf("HA snapshot header is %d bytes; the snapshot is damaged", n)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(br, raw); err != nil {
		return fmt.Errorf("read HA snapshot header: %w", err)
	}
	var hdr snapshotHeader
	if err := json.Unmarshal(raw, &hdr); err != nil {
		return fmt.Errorf("decode HA snapshot header: %w", err)
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("restore HA snapshot: %w", err)
	}
	work, err := os.MkdirTemp(f.dir, "restore-")
	if err != nil {
		return fmt.Errorf("restore HA snapshot: %w", err)
	}
	defer os.RemoveAll(work)
	state, acct := filepath.Join(work, "state.db"), filepath.Join(work, "accounting.db")
	for _, p := range []struct {
		path string
		size int64
	}{{state, hdr.StateBytes}, {acct, hdr.AcctBytes}} {
		if err := writeFile(p.path, io.LimitReader(br, p.size), p.size); err != nil {
			return fmt.Errorf("restore HA snapshot: %w", err)
		}
	}
	ctx := context.Background()
	if err := f.state.Restore(ctx, state); err != nil {
		return err
	}
	if err := f.acct.Restore(ctx, acct); err != nil {
		return err
	}
	f.setAPIs(hdr.APIs)
	f.setConfig(hdr.Config)
	f.log.Info("HA snapshot restored", "state_bytes", hdr.StateBytes, "accounting_bytes", hdr.AcctBytes)
	return nil
}

func writeFile(path string, r io.Reader, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = errors.New("snapshot ends early")
	}
	return err
}

// startFrom makes state.db and accounting.db what Raft's replay at start
// expects. Raft rebuilds the FSM at every start: it restores the latest
// snapshot (Restore replaces both databases) and applies the log after it.
// With no snapshot yet the whole log is replayed, so both databases are
// emptied first (the log holds all they had). A member with no Raft state
// at all must start empty: its state would be on no other member.
func (f *fsm) startFrom(hasState bool, snaps raft.SnapshotStore) error {
	ctx := context.Background()
	if !hasState {
		jobs, nodes, _, err := f.state.Load(ctx)
		if err != nil {
			return err
		}
		if len(jobs)+len(nodes) > 0 {
			return fmt.Errorf("state.db holds %d jobs and %d nodes but this member has no Raft state: an HA member starts from an empty state dir (the others would never see them); move state.db and accounting.db away, or drain the queue in single-controller mode first", len(jobs), len(nodes))
		}
		return nil
	}
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list raft snapshots: %w", err)
	}
	if len(list) > 0 {
		return nil
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	work, err := os.MkdirTemp(f.dir, "empty-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	es, err := store.Open(ctx, filepath.Join(work, "state.db"), store.Replica())
	if err != nil {
		return err
	}
	es.Close()
	ea, err := accounting.Open(filepath.Join(work, "accounting.db"))
	if err != nil {
		return err
	}
	ea.Close()
	if err := f.state.Restore(ctx, filepath.Join(work, "state.db")); err != nil {
		return err
	}
	return f.acct.Restore(ctx, filepath.Join(work, "accounting.db"))
}
