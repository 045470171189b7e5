package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RaftStats are an HA member's Raft figures (gpud/ha's Group.Stats,
// adapted by gpud main).
type RaftStats struct {
	// State is leader, follower, candidate or shutdown.
	State                                         string
	Term, CommitIndex, AppliedIndex, LastLogIndex uint64
	// LastContact is a follower's last contact with the leader (zero
	// for the leader or when never).
	LastContact time.Time
}

var (
	descRaftState   = prometheus.NewDesc("gpud_raft_state", "1 for this HA member's current Raft state (leader, follower, candidate, shutdown), 0 for the others.", []string{"state"}, nil)
	descRaftTerm    = prometheus.NewDesc("gpud_raft_term", "This HA member's current Raft term.", nil, nil)
	descRaftCommit  = prometheus.NewDesc("gpud_raft_commit_index", "Highest Raft log index this member knows to be committed.", nil, nil)
	descRaftApplied = prometheus.NewDesc("gpud_raft_applied_index", "Highest Raft log index this member applied to its state.db and accounting.db.", nil, nil)
	descRaftLast    = prometheus.NewDesc("gpud_raft_last_log_index", "Highest Raft log index in this member's log.", nil, nil)
	descRaftContact = prometheus.NewDesc("gpud_raft_last_contact_seconds", "Seconds since a follower last heard from the leader (0 on the leader).", nil, nil)
)

// AddRaft registers the Raft gauges (read from src at each scrape) and
// the commit latency histogram; it returns the function that observes
// one commit's wait for a majority (gpud/ha's Config.Observe). Call it
// once, on HA members only.
func (m *Controller) AddRaft(src func() RaftStats) func(time.Duration) {
	apply := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gpud_raft_apply_duration_seconds",
		Help: "Time from handing a commit to Raft to its being committed by a majority and applied here (leader).",
		// 100µs to ~6.5s.
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	})
	m.reg.MustRegister(apply, &raftCollector{src: src})
	return func(d time.Duration) { apply.Observe(d.Seconds()) }
}

type raftCollector struct{ src func() RaftStats }

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descRaftCommit, descRaftApplied, descRaftLast, descRaftContact} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src()
	for _, st := range []string{"leader", "follower", "candidate", "shutdown"} {
		v := 0.0
		if st == s.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, st)
	}
	ch <- prometheus.MustNewConstMetric(descRaftTerm, prometheus.GaugeValue, float64(s.Term))
	ch <- prometheus.MustNewConstMetric(descRaftCommit, prometheus.GaugeValue, float64(s.CommitIndex))
	ch <- prometheus.MustNewConstMetric(descRaftApplied, prometheus.GaugeValue, float64(s.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(descRaftLast, prometheus.GaugeValue, float64(s.LastLogIndex))
	contact := 0.0
	if !s.LastContact.IsZero() && s.State != "leader" {
		contact = time.Since(s.LastContact).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(descRaftContact, prometheus.GaugeValue, contact)
}
