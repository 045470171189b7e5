package config

import (
	"os"
	"strings"
	"testing"
)

func haConfig() Controller {
	c := Defaults()
	c.Controller.ListenTCP = "10.0.0.1:6817"
	c.HA = HA{ID: "c1", RaftListen: "10.0.0.1:6818", Peers: []HAPeer{
		{ID: "c1", Raft: "10.0.0.1:6818", API: "https://10.0.0.1:6817"},
		{ID: "c2", Raft: "10.0.0.2:6818", API: "https://10.0.0.2:6817"},
		{ID: "c3", Raft: "10.0.0.3:6818", API: "https://10.0.0.3:6817"},
	}}
	return c
}

func TestHAValidate(t *testing.T) {
	if err := haConfig().Validate(); err != nil {
		t.Fatalf("a valid [ha]: %v", err)
	}
	if Defaults().HA.Enabled() {
		t.Error("HA is on by default")
	}
	for _, tc := range []struct {
		name   string
		modify func(*Controller)
		want   []string
	}{
		{"no tcp", func(c *Controller) { c.Controller.ListenTCP = "" }, []string{"[controller] listen_tcp is empty"}},
		{"tls cert", func(c *Controller) { c.Auth.TLSCert, c.Auth.TLSKey = "/x.pem", "/x.key" }, []string{"[auth] tls_cert is set"}},
		{"self not a peer", func(c *Controller) { c.HA.ID = "c9" }, []string{`this member (id "c9") is not listed`}},
		{"join needs no self", func(c *Controller) { c.HA.ID, c.HA.Join = "c9", true }, nil},
		{"bad peers", func(c *Controller) {
			c.HA.Peers[1].ID, c.HA.Peers[2].Raft, c.HA.Peers[2].API = "c1", "10.0.0.3", "http://10.0.0.3:6817"
		}, []string{`peers[1] id: "c1" must be a unique name`, `(c3) raft: "10.0.0.3" is not host:port`, `(c3) api: "http://10.0.0.3:6817" is not an https:// URL`}},
		{"bad listen", func(c *Controller) { c.HA.RaftListen = "6818" }, []string{`raft_listen: "6818" is not host:port`}},
		{"lease not below heartbeat", func(c *Controller) { c.HA.HeartbeatTimeout, c.HA.LeaderLeaseTimeout = "1s", "1s" },
			[]string{"leader_lease_timeout: 1s must be below heartbeat_timeout"}},
		{"bad duration", func(c *Controller) { c.HA.SnapshotInterval = "often" }, []string{`snapshot_interval: "often" is not a duration`}},
	} {
		c := haConfig()
		tc.modify(&c)
		err := c.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: valid; want %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nlacks %q", tc.name, err, w)
			}
		}
	}
}

// The shipped gpud.toml's [ha] example works as its comments say: with
// its [[ha.peers]] tables uncommented, id, raft_listen and listen_tcp
// filled in, it loads as a member of a three-member group. (Before, the
// file had peers = [] above the commented tables: uncommenting them was
// a duplicate key.)
func TestShippedHAExampleLoads(t *testing.T) {
	b, err := os.ReadFile("../../etc/gpud.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range [][2]string{
		{"\nid = \"\"\n", "\nid = \"c2\"\n"},
		{`raft_listen = ""`, `raft_listen = "10.0.0.2:6819"`},
		{`listen_tcp = ""`, `listen_tcp = "10.0.0.2:6817"`},
		{"\n# [[ha.peers]]\n", "\n[[ha.peers]]\n"},
		{"\n# id = \"c", "\nid = \"c"},
		{"\n# raft = \"10.0.0.", "\nraft = \"10.0.0."},
		{"\n# api = \"https://10.0.0.", "\napi = \"https://10.0.0."},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml lacks %q", r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	c, err := LoadController(writeFile(t, "gpud.toml", s))
	if err != nil {
		t.Fatalf("etc/gpud.toml with its [ha] example uncommented: %v", err)
	}
	if got := len(c.HA.Peers); got != 3 || c.HA.Peers[1].ID != "c2" || c.HA.Peers[2].Raft != "10.0.0.3:6819" {
		t.Errorf("peers = %+v; want the example's three members", c.HA.Peers)
	}
}
