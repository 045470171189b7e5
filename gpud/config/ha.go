package config

import (
	"net"
	"net/url"

	"github.com/gpud/gpud/gpud/auth"
)

// HA is [ha]: this controller as one member of a Raft group of 3 or 5
// (docs/ha.md). Absent (no id), the controller runs alone, as it always
// has.
type HA struct {
	// ID names this member; it must be one of Peers' ids (unless Join).
	ID string `toml:"id"`
	// RaftListen is host:port this member accepts Raft traffic on (mutual
	// TLS with the cluster CA); its peers entry's raft is what the others
	// dial, and may differ (e.g. 0.0.0.0:6819 here, 10.0.0.1:6819 there).
	RaftListen string   `toml:"raft_listen"`
	Peers      []HAPeer `toml:"peers"`
	// Join: start without making the group; wait to be added by the
	// leader (POST /v1/controllers).
	Join bool `toml:"join"`
	// Timeouts; empty takes the defaults (500ms, 500ms, 400ms, 10s).
	HeartbeatTimeout   Duration `toml:"heartbeat_timeout"`
	ElectionTimeout    Duration `toml:"election_timeout"`
	LeaderLeaseTimeout Duration `toml:"leader_lease_timeout"`
	ApplyTimeout       Duration `toml:"apply_timeout"`
	// SnapshotThreshold entries since the last snapshot make a new one
	// (the log is compacted to TrailingLogs); 0 takes 8192 and 10240.
	SnapshotThreshold uint64 `toml:"snapshot_threshold"`
	TrailingLogs      uint64 `toml:"trailing_logs"`
	// SnapshotInterval is how often the threshold is checked ("" = 2m).
	SnapshotInterval Duration `toml:"snapshot_interval"`
}

// HAPeer is one [[ha.peers]] entry (or an inline table of peers).
type HAPeer struct {
	ID string `toml:"id"`
	// Raft is host:port of the member's Raft traffic.
	Raft string `toml:"raft"`
	// API is the member's API base URL (https://host:port), given to
	// clients as the leader's address.
	API string `toml:"api"`
}

// Enabled says whether [ha] is set.
func (h HA) Enabled() bool { return h.ID != "" || len(h.Peers) > 0 }

func (c Controller) validateHA(p *problems) {
	h := c.HA
	if !h.Enabled() {
		return
	}
	if !auth.ValidName(h.ID) {
		p.addf("[ha] id: %q must be a name (letters, digits, _ . @ -)", h.ID)
	}
	if _, _, err := net.SplitHostPort(h.RaftListen); err != nil {
		p.addf("[ha] raft_listen: %q is not host:port (e.g. \"0.0.0.0:6819\")", h.RaftListen)
	}
	if c.Controller.ListenTCP == "" {
		p.addf("[ha]: [controller] listen_tcp is empty; members of an HA group serve clients and nodes over TCP (and share its CA)")
	}
	if c.Auth.TLSCert != "" {
		p.addf("[ha]: [auth] tls_cert is set; an HA group's members authenticate each other with certificates of the gpud CA under <state_dir>/tls (copy it to every member), so leave tls_cert empty")
	}
	seen := map[string]bool{}
	self := false
	for i, peer := range h.Peers {
		if !auth.ValidName(peer.ID) || seen[peer.ID] {
			p.addf("[ha] peers[%d] id: %q must be a unique name", i, peer.ID)
		}
		seen[peer.ID] = true
		self = self || peer.ID == h.ID
		if _, _, err := net.SplitHostPort(peer.Raft); err != nil {
			p.addf("[ha] peers[%d] (%s) raft: %q is not host:port", i, peer.ID, peer.Raft)
		}
		if u, err := url.Parse(peer.API); err != nil || u.Scheme != "https" || u.Host == "" {
			p.addf("[ha] peers[%d] (%s) api: %q is not an https:// URL (e.g. \"https://10.0.0.1:6817\")", i, peer.ID, peer.API)
		}
	}
	if !self && !h.Join {
		p.addf("[ha] peers: this member (id %q) is not listed; list every member, or set join = true to be added later", h.ID)
	}
	p.duration("[ha] heartbeat_timeout", h.HeartbeatTimeout, false)
	p.duration("[ha] election_timeout", h.ElectionTimeout, false)
	p.duration("[ha] leader_lease_timeout", h.LeaderLeaseTimeout, false)
	p.duration("[ha] apply_timeout", h.ApplyTimeout, false)
	p.duration("[ha] snapshot_interval", h.SnapshotInterval, false)
	if l, hb := h.LeaderLeaseTimeout.Std(), h.HeartbeatTimeout.Std(); l > 0 && hb > 0 && l >= hb {
		p.addf("[ha] leader_lease_timeout: %s must be below heartbeat_timeout (%s), so a cut-off leader stops before the others elect a new one", h.LeaderLeaseTimeout, h.HeartbeatTimeout)
	}
}
