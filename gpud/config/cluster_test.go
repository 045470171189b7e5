package config

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestWithMemberKeepsOnlyMemberSettings: the group's configuration, sent
// through the HA log as JSON, comes back unchanged, and WithMember takes
// from the member exactly its own settings (addresses, state dir, [ha],
// file paths) and nothing of the policy.
func TestWithMemberKeepsOnlyMemberSettings(t *testing.T) {
	group, err := LoadController("../../etc/gpud.toml")
	if err != nil {
		t.Fatal(err)
	}
	group.Partitions = append(group.Partitions, Partition{Name: "extra", Nodes: []string{"n9"}})
	group.Auth.Operators = []string{"olga"}
	group.Controller.NodeTimeout = "45s"
	raw, err := json.Marshal(group)
	if err != nil {
		t.Fatal(err)
	}
	var back Controller
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, group) {
		t.Fatalf("the configuration does not survive the log's JSON:\n%+v\n%+v", back, group)
	}

	member := group
	member.Partitions = nil
	member.Auth.Operators = nil
	member.Controller.NodeTimeout = "5s"
	member.Controller.ListenTCP, member.Controller.StateDir, member.Controller.ListenSocket = "10.0.0.2:6817", "/var/lib/m2", "/run/m2.sock"
	member.HA.ID = "m2"
	member.Accounting.Path = "/data/acct.db"
	member.Auth.TLSCert, member.Auth.TLSKey, member.Auth.TokenKey = "/m2.crt", "/m2.key", "/m2.tok"
	member.Auth.TLSHosts = []string{"m2.example"}

	got := back.WithMember(member)
	want := group
	want.Controller.ListenTCP, want.Controller.StateDir, want.Controller.ListenSocket = "10.0.0.2:6817", "/var/lib/m2", "/run/m2.sock"
	want.HA = member.HA
	want.Accounting.Path = "/data/acct.db"
	want.Auth.TLSCert, want.Auth.TLSKey, want.Auth.TokenKey = "/m2.crt", "/m2.key", "/m2.tok"
	want.Auth.TLSHosts = []string{"m2.example"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithMember:\n got %+v\nwant %+v", got, want)
	}
	if got.Controller.NodeTimeout != "45s" || len(got.Partitions) != len(group.Partitions) || got.Auth.Operators[0] != "olga" {
		t.Errorf("WithMember took policy from the member: node_timeout %s, %d partitions, operators %v", got.Controller.NodeTimeout, len(got.Partitions), got.Auth.Operators)
	}
}
