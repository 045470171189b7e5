package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRaftScrape(t *testing.T) {
	m := NewController()
	observe := m.AddRaft(func() RaftStats {
		return RaftStats{State: "follower", Term: 7, CommitIndex: 120, AppliedIndex: 119, LastLogIndex: 121,
			LastContact: time.Now().Add(-2 * time.Second)}
	})
	observe(3 * time.Millisecond)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	body := scrape(t, srv.URL)
	for _, s := range []string{
		`gpud_raft_state{state="follower"} 1`, `gpud_raft_state{state="leader"} 0`,
		"gpud_raft_term 7", "gpud_raft_commit_index 120", "gpud_raft_applied_index 119", "gpud_raft_last_log_index 121",
		"gpud_raft_apply_duration_seconds_count 1",
	} {
		if !strings.Contains(body, s+"\n") {
			t.Errorf("scrape lacks %q", s)
		}
	}
	if !strings.Contains(body, "gpud_raft_last_contact_seconds 2") {
		t.Errorf("last contact is not about 2s:\n%s", body)
	}
}
