package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The shipped files document every key with its default; they must load
// and agree with the defaults.
func TestShippedFilesMatchDefaults(t *testing.T) {
	c, err := LoadController("../../etc/gpud.toml")
	if err != nil {
		t.Fatalf("load shipped gpud.toml: %v", err)
	}
	if diff := cmp.Diff(Defaults(), c, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("etc/gpud.toml vs Defaults() (-want +got):\n%s", diff)
	}
	n, err := LoadNode("../../etc/node.toml")
	if err != nil {
		t.Fatalf("load shipped node.toml: %v", err)
	}
	if diff := cmp.Diff(DefaultNode(), n, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("etc/node.toml vs DefaultNode() (-want +got):\n%s", diff)
	}
}

// Every key of the config types must appear in the shipped file, so the
// file stays the complete reference. Decoding with defaults zeroed and
// comparing would miss keys whose default is the zero value, so this
// checks the keys by name.
func TestShippedFilesListEveryKey(t *testing.T) {
	for _, tc := range []struct {
		file string
		root any
	}{
		{"../../etc/gpud.toml", Controller{}},
		{"../../etc/node.toml", Node{}},
	} {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		// An [[ha.peers]] entry would turn HA on, and a [[power.nodes]]
		// entry declare nodes, so the file shows them commented out.
		commented := map[string]bool{}
		for _, key := range append(allKeys(HAPeer{}), allKeys(PowerNode{})...) {
			commented[key] = strings.Contains(text, "\n# "+key+" = ")
		}
		for _, key := range allKeys(tc.root) {
			if !strings.Contains(text, "\n"+key+" = ") && !commented[key] {
				t.Errorf("%s lacks key %q", tc.file, key)
			}
		}
	}
}

func TestDefaultsAreValid(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v", err)
	}
	if err := DefaultNode().Validate(); err != nil {
		t.Errorf("DefaultNode().Validate() = %v", err)
	}
	c, err := LoadController("")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Defaults(), c); diff != "" {
		t.Errorf("LoadController(\"\") (-want +got):\n%s", diff)
	}
	n, err := LoadNode("")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultNode(), n); diff != "" {
		t.Errorf("LoadNode(\"\") (-want +got):\n%s", diff)
	}
}

func TestLoadOverridesDefaults(t *testing.T) {
	path := writeFile(t, "gpud.toml", `version = 1
default_qos = "std"
[scheduler]
interval = "1s"
[[partition]]
name = "a100"
nodes = ["n1", "n2"]
default = true
default_time = "30m"
max_time = "2d"
state = "UP"
placement = "spread"
[[partition]]
name = "debug"
nodes = ["ALL"]
[[qos]]
name = "std"
preempt_mode = "off"
`)
	c, err := LoadController(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.DefaultQOS = "std"
	want.Scheduler.Interval = "1s"
	want.Partitions = []Partition{
		{Name: "a100", Nodes: []string{"n1", "n2"}, Default: true, DefaultTime: "30m", MaxTime: "2d", State: "UP", Placement: "spread"},
		{Name: "debug", Nodes: []string{"ALL"}}, // keys left out keep zero values: UP, no limits
	}
	want.QOS = []QOS{{Name: "std", PreemptMode: "off"}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("loaded config (-want +got):\n%s", diff)
	}
	if got := c.Partitions[0].MaxTime.Std(); got != 48*time.Hour {
		t.Errorf("max_time = %v, want 48h", got)
	}
	if p, ok := c.DefaultPartition(); !ok || p.Name != "a100" {
		t.Errorf("DefaultPartition = %v, %v", p.Name, ok)
	}
	if got := c.AccountingPath(); got != "/var/lib/gpud/accounting.db" {
		t.Errorf("AccountingPath = %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		node    bool
		content string
		want    []string // each must appear in the error
	}{
		{
			name:    "unknown key names key, table and allowed keys",
			content: "version = 1\n[scheduler]\nintervall = \"5s\"\n",
			want:    []string{`line 3: unknown key "intervall" in [scheduler]`, "allowed: backfill_depth, backfill_window, checkpoint_grace, interval, max_jobs_per_cycle, preempt_min_runtime, priority"},
		},
		{
			name:    "unknown key in array table",
			content: "version = 1\n[[partition]]\nname = \"x\"\nmaxtime = \"1h\"\n",
			want:    []string{`unknown key "maxtime" in [[partition]]`, "max_time"},
		},
		{
			name:    "unknown nested key and top-level key, all reported",
			content: "version = 1\ncolour = 1\n[scheduler.priority]\nweight_size = 1\n",
			want:    []string{`unknown key "colour" at the top level`, `unknown key "weight_size" in [scheduler.priority]`},
		},
		{
			name:    "unknown table",
			content: "version = 1\n[scheduller]\ninterval = \"5s\"\n",
			want:    []string{`line 2: unknown table "scheduller" at the top level (allowed: account, accounting, api, auth, controller`},
		},
		{
			name:    "wrong type names key",
			content: "version = 1\n[scheduler]\nmax_jobs_per_cycle = \"many\"\n",
			want:    []string{"line 3: [scheduler] max_jobs_per_cycle: got a TOML string, want an integer"},
		},
		{
			name: "api connection limits out of range, all reported",
			content: "version = 1\n[api]\nread_timeout = \"0s\"\nidle_timeout = \"2h\"\nwrite_timeout = \"5s\"\n" +
				"max_conns_per_user = 0\nmax_conns_per_ip = -1\nmax_conns = 10\nconn_limit_exempt = [\"10.0.0.0/8\", \"nodes\"]\nmax_conn = 1\n",
			want: []string{`unknown key "max_conn" in [api]`},
		},
		{
			name: "api connection limits validated",
			content: "version = 1\n[api]\nread_timeout = \"0s\"\nidle_timeout = \"2h\"\nwrite_timeout = \"5s\"\n" +
				"max_conns_per_user = 0\nmax_conns_per_ip = -1\nmax_conns = 10\nconn_limit_exempt = [\"10.0.0.0/8\", \"nodes\"]\n",
			want: []string{`[api] read_timeout: "0s" must be a positive duration`, "[api] idle_timeout: 2h is out of range; give 1s to 1h",
				"[api] write_timeout: 5s is out of range", "[api] max_conns_per_user: 0 is out of range; give 1 to 1048576",
				"[api] max_conns_per_ip: -1 is out of range", `[api] conn_limit_exempt: "nodes" is not a network; write it as CIDR`},
		},
		{
			name:    "api total cap below a per-user cap",
			content: "version = 1\n[api]\nmax_conns = 10\n",
			want:    []string{"[api] max_conns: 10 is below a per-user or per-address cap"},
		},
		{
			name:    "duration as number",
			content: "version = 1\n[scheduler]\ninterval = 5\n",
			want:    []string{`[scheduler] interval: got a TOML integer, want a duration string such as "30s"`},
		},
		{
			name:    "syntax error has a line",
			content: "version = 1\n[scheduler\n",
			want:    []string{"line 2:"},
		},
		{
			name:    "missing version",
			content: "[scheduler]\ninterval = \"5s\"\n",
			want:    []string{`version: missing; add "version = 1"`},
		},
		{
			name:    "future version",
			content: "version = 2\n[newtable]\n",
			want:    []string{"version: 2 is not supported; this gpud reads version 1"},
		},
		{
			name:    "node: unknown key",
			node:    true,
			content: "version = 1\n[node]\ngpu = \"none\"\n",
			want:    []string{`unknown key "gpu" in [node]`, "gpus"},
		},
		{
			name:    "node: version",
			node:    true,
			content: "version = 0\n",
			want:    []string{"version: 0 is not supported"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "c.toml", tc.content)
			var err error
			if tc.node {
				_, err = LoadNode(path)
			} else {
				_, err = LoadController(path)
			}
			if err == nil {
				t.Fatal("load succeeded")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestMissingExplicitFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.toml")
	for _, load := range []func(string) error{
		func(p string) error { _, err := LoadController(p); return err },
		func(p string) error { _, err := LoadNode(p); return err },
	} {
		err := load(path)
		if err == nil || !strings.Contains(err.Error(), path+": file does not exist") {
			t.Errorf("load of missing file = %v, want it to name the file", err)
		}
	}
}

func TestControllerValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Controller)
		want   []string
	}{
		{"bad duration", func(c *Controller) { c.Scheduler.Interval = "abc" },
			[]string{`[scheduler] interval: "abc" is not a duration (use e.g. "5s"`}},
		{"zero required duration", func(c *Controller) { c.Controller.NodeTimeout = "0" },
			[]string{`[controller] node_timeout: "0" must be a positive duration`}},
		{"node timeout below two heartbeats", func(c *Controller) { c.Controller.NodeTimeout = "6s" },
			[]string{"[controller] node_timeout: 6s must be at least twice heartbeat_interval"}},
		{"no listener", func(c *Controller) { c.Controller.ListenSocket = "" },
			[]string{"[controller] listen_socket: empty while listen_tcp is empty"}},
		{"gc percent", func(c *Controller) { c.Controller.GCPercent = 5 },
			[]string{"[controller] gc_percent: 5 is out of range; use 25 to 1000"}},
		{"bad tcp", func(c *Controller) { c.Controller.ListenTCP = "6817" },
			[]string{`[controller] listen_tcp: "6817" is not host:port`}},
		{"relative state dir", func(c *Controller) { c.Controller.StateDir = "state" },
			[]string{`[controller] state_dir: "state" must be an absolute path`}},
		{"secret env and revoked node certs", func(c *Controller) {
			c.Auth.SecretEnv, c.Auth.RevokedNodeCerts = []string{"AWS_SECRET_ACCESS_KEY", "VAULT_*", "A B", "*"}, []string{"0A:1b:ff", "xyz"}
		}, []string{`[auth] secret_env: "A B" is not a variable name or a prefix ending in '*'`, `[auth] secret_env: "*" is not a variable name`,
			`[auth] revoked_node_certs: "xyz" is not a certificate serial number`}},
		{"max jobs", func(c *Controller) { c.Scheduler.MaxJobsPerCycle = 0 },
			[]string{"[scheduler] max_jobs_per_cycle: 0 must be at least 1"}},
		{"backfill and preemption", func(c *Controller) {
			c.Scheduler.BackfillDepth, c.Scheduler.PreemptMinRuntime, c.Scheduler.CheckpointGrace = -2, "soon", "-1m"
		}, []string{"[scheduler] backfill_depth: -2 must be at least 1, or -1 for every blocked job",
			`[scheduler] preempt_min_runtime: "soon" is not a duration`, `[scheduler] checkpoint_grace: "-1m" is not a duration`}},
		{"negative weight", func(c *Controller) { c.Scheduler.Priority.WeightQOS = -1 },
			[]string{"[scheduler.priority] weight_qos: -1 must be between 0"}},
		{"half life", func(c *Controller) { c.Fairshare.DecayHalfLife = "1w" },
			[]string{`[fairshare] decay_half_life: "1w" is not a duration`}},
		{"two default partitions", func(c *Controller) {
			c.Partitions = append(c.Partitions, Partition{Name: "b", Nodes: []string{"n1"}, Default: true, MaxTime: "1h", DefaultTime: "1h", State: "UP"})
		}, []string{"[[partition]] default: 2 partitions are marked default = true; mark exactly one"}},
		{"no default partition", func(c *Controller) { c.Partitions[0].Default = false },
			[]string{"[[partition]] default: 0 partitions"}},
		{"partition problems all reported", func(c *Controller) {
			p := &c.Partitions[0]
			p.Nodes = []string{"ALL", "n1"}
			p.MaxTime = "1h"
			p.DefaultTime = "2h"
			p.State = "up"
			p.AllowAccounts = []string{"physics"}
			p.Placement = "bestfit"
		}, []string{
			`[[partition]] "gpu" nodes: "ALL" must be the only entry`,
			`[[partition]] "gpu" default_time: "2h" exceeds max_time "1h"`,
			`[[partition]] "gpu" state: "up" is not allowed (use "UP" or "DOWN")`,
			`[[partition]] "gpu" allow_accounts: "physics" is not an [[account]] (have "default")`,
			`[[partition]] "gpu" placement: "bestfit" is not a placement (use "pack", "spread", "first-fit", "fgd")`,
		}},
		{"duplicate and missing names", func(c *Controller) {
			c.QOS = append(c.QOS, QOS{Name: "low", PreemptMode: "off"}, QOS{PreemptMode: "off"})
		}, []string{`[[qos]] "low" name: "low" is defined twice`, "[[qos]] #5 name: missing"}},
		{"qos preempt unknown", func(c *Controller) { c.QOS[2].Preempt = []string{"lowest"} },
			[]string{`[[qos]] "high" preempt: "lowest" is not a [[qos]] (have "high", "low", "normal")`}},
		{"qos preempt self", func(c *Controller) { c.QOS[2].Preempt = []string{"high"} },
			[]string{`[[qos]] "high" preempt: a QOS cannot preempt itself`}},
		{"qos preempt mode", func(c *Controller) { c.QOS[2].PreemptMode = "suspend" },
			[]string{`[[qos]] "high" preempt_mode: "suspend" is not allowed (use "requeue", "cancel", "checkpoint", "off")`}},
		{"qos preempt off with list", func(c *Controller) { c.QOS[2].PreemptMode = "off" },
			[]string{`[[qos]] "high" preempt_mode: "off" but preempt lists "low"`}},
		{"submit limits", func(c *Controller) {
			c.Limits.MaxSubmitSize, c.Limits.MaxSubmitJobsPerUser = "64X", -1
			c.QOS[0].MaxSubmitJobsPerUser, c.Accounts[0].MaxSubmitJobsPerUser = -2, -3
		}, []string{`[limits] max_submit_size: "64X" is not a size from 1M to 1T (e.g. "64M", "1G"), or "UNLIMITED"`,
			"[limits] max_submit_jobs_per_user: -1 must not be negative (0 = no limit)",
			`[[qos]] "low" max_submit_jobs_per_user: -2 must not be negative`,
			`[[account]] "default" max_submit_jobs_per_user: -3 must not be negative`}},
		{"submit size too big", func(c *Controller) { c.Limits.MaxSubmitSize, c.Limits.MaxSubmitSizePerUser = "2T", "-5M" },
			[]string{`[limits] max_submit_size: "2T" is not a size from 1M to 1T`, `[limits] max_submit_size_per_user: "-5M" is not a size`}},
		{"qos limits", func(c *Controller) { c.QOS[0].MaxGPUsPerUser = -1; c.QOS[0].MaxWall = "forever" },
			[]string{`[[qos]] "low" max_gpus_per_user: -1`, `[[qos]] "low" max_wall: "forever" is not a duration`}},
		{"idle policy problems all reported", func(c *Controller) {
			c.Partitions[0].IdlePolicy = IdlePolicy{IdleGPUUtil: 120, IdleAfter: "0", IdleAction: "kill", IdleHook: "notify.sh"}
			c.QOS[0].IdlePolicy = IdlePolicy{IdleGPUUtil: 5, IdleAfter: "30m", IdleAction: "hook"}
			c.QOS[1].IdlePolicy = IdlePolicy{IdleAfter: "30m"}
		}, []string{
			`[[partition]] "gpu" idle_action: "kill" is not allowed (use "flag", "hook", "cancel", or "" for off)`,
			`[[partition]] "gpu" idle_gpu_util: 120 must be a percentage above 0 and at most 100`,
			`[[partition]] "gpu" idle_after: "0" must be a positive duration`,
			`[[partition]] "gpu" idle_hook: "notify.sh" is not an absolute path`,
			`[[qos]] "low" idle_hook: missing; idle_action = "hook" needs a program`,
			`[[qos]] "normal" idle_action: empty (policy off) but idle_gpu_util, idle_after or idle_hook is set`,
		}},
		{"default qos", func(c *Controller) { c.DefaultQOS = "normall" },
			[]string{`default_qos: "normall" is not a [[qos]]`}},
		{"account tree", func(c *Controller) {
			c.Accounts = append(c.Accounts,
				Account{Name: "a", Parent: "b", Shares: 1},
				Account{Name: "b", Parent: "a", Shares: 1},
				Account{Name: "c", Parent: "physics", Shares: 0},
			)
		}, []string{
			`[[account]] "a" parent: "b" makes a cycle`,
			`[[account]] "c" parent: "physics" is not an [[account]]`,
			`[[account]] "c" shares: 0 must be at least 1`,
		}},
		{"root account", func(c *Controller) { c.Accounts = append(c.Accounts, Account{Name: "root", Shares: 1}) },
			[]string{`[[account]] "root" name: "root" is the implicit root`}},
		{"default account", func(c *Controller) { c.DefaultAccount = "nobody" },
			[]string{`default_account: "nobody" is not an [[account]]`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Defaults()
			tc.modify(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted the config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestNodeValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Node)
		want   []string
	}{
		{"gpus", func(n *Node) { n.Node.GPUs = "mock:dgx-b300" },
			[]string{`[node] gpus: "mock:dgx-b300" is not allowed (use "auto", "nvml", "none", "mock:dgx-a100", "mock:dgx-h100", "mock:dgx-h200")`}},
		{"mem", func(n *Node) { n.Node.Mem = "lots" },
			[]string{`[node] mem: "lots" is not a memory size`}},
		{"mem unit", func(n *Node) { n.Node.Mem = "512X" },
			[]string{`[node] mem: "512X" is not a memory size (unknown unit "X"`}},
		{"controller", func(n *Node) { n.Node.Controller = "ctl:6817" },
			[]string{`[node] controller: "ctl:6817" is not an address`}},
		{"relative unix socket", func(n *Node) { n.Node.Controller = "unix://gpud.sock" },
			[]string{`[node] controller: "unix://gpud.sock" needs an absolute socket path`}},
		{"controller list", func(n *Node) { n.Node.Controller = "https://c1:6817, c2:6817,https://" },
			[]string{`[node] controller: "c2:6817" is not an address`, `[node] controller: "https://" has no host`}},
		{"oci_runtime", func(n *Node) { n.Node.OCIRuntime = "crun-1.8" },
			[]string{`[node] oci_runtime: "crun-1.8" is not "runc", "crun" or a clean absolute path to a runc-compatible binary`}},
		{"oci_runtime relative", func(n *Node) { n.Node.OCIRuntime = "/usr/bin/../bin/runc" },
			[]string{`[node] oci_runtime: "/usr/bin/../bin/runc" is not "runc", "crun" or a clean absolute path`}},
		{"crun read-only root", func(n *Node) { n.Node.OCIRuntime, n.Node.HostRoot = "/usr/local/bin/crun", "read-only" },
			[]string{`[node] oci_runtime: "/usr/local/bin/crun" with host_root = "read-only": crun leaves the host root writable`}},
		{"metrics_listen", func(n *Node) { n.Node.MetricsListen = "9400" },
			[]string{`[node] metrics_listen: "9400" is not host:port`}},
		{"health limits", func(n *Node) {
			n.Health.Interval = "0s"
			n.Health.GPUPowerMaxW = -5
			n.Health.ECCUncorrectedMax = -2
			n.Health.FatalXIDs = []int{79, 0}
		}, []string{
			`[health] interval: "0s" must be a positive duration`,
			"[health] gpu_power_max_w: -5 must not be negative",
			"[health] ecc_uncorrected_max: -2 must be -1 (off) or more",
			"[health] fatal_xids: 0 is not an XID",
		}},
		{"mounts", func(n *Node) {
			n.Node.Mounts = []string{"/scratch", "home", "/", "/data/"}
		}, []string{
			`[node] mounts: "home" must be a clean absolute path other than /`,
			`[node] mounts: "/" must be a clean absolute path other than /`,
			`[node] mounts: "/data/" must be a clean absolute path other than /`,
		}},
		{"several at once", func(n *Node) {
			n.Node.CPUs = -1
			n.Node.KillGrace = "soon"
			n.Node.CDIDir = "cdi"
			n.Node.Features = []string{"ib", "a b"}
			n.Health.GPUTempMaxC = 200
			n.Health.GPUTempSustain = ""
		}, []string{
			"[node] cpus: -1 must not be negative",
			`[node] kill_grace: "soon" is not a duration`,
			`[node] cdi_dir: "cdi" must be an absolute path`,
			`[node] features: "a b" is not a feature name`,
			"[health] gpu_temp_max_c: 200 is outside 30-120",
			`[health] gpu_temp_sustain: "" must be a positive duration`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := DefaultNode()
			tc.modify(&n)
			err := n.Validate()
			if err == nil {
				t.Fatal("Validate accepted the config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestNodeHelpers(t *testing.T) {
	n := DefaultNode().Node
	n.Mem = "2T"
	if got := n.MemMiB(); got != 2<<20 {
		t.Errorf("MemMiB(2T) = %d", got)
	}
	n.Name = "gpu-01"
	if got, err := n.NodeName(); err != nil || got != "gpu-01" {
		t.Errorf("NodeName = %q, %v", got, err)
	}
	n.Name = ""
	host, _ := os.Hostname()
	if got, err := n.NodeName(); err != nil || got != host {
		t.Errorf("NodeName with empty name = %q, %v; want hostname %q", got, err, host)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"30s", 30 * time.Second, false},
		{"1h30m", 90 * time.Minute, false},
		{"7d", 7 * 24 * time.Hour, false},
		{"1d12h", 36 * time.Hour, false},
		{"", 0, false},
		{"0", 0, false},
		{"UNLIMITED", 0, false},
		{"unlimited", 0, false},
		{"abc", 0, true},
		{"5", 0, true},
		{"-5s", 0, true},
		{"xd", 0, true},
		{"1w", 0, true},
	}
	for _, tc := range tests {
		got, err := parseDuration(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseMemMiB(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"", 0, false},
		{"512G", 512 << 10, false},
		{"512GiB", 512 << 10, false},
		{"512gb", 512 << 10, false},
		{"64000M", 64000, false},
		{"64000", 64000, false},
		{"1T", 1 << 20, false},
		{"0G", 0, true},
		{"G", 0, true},
		{"12K", 0, true},
		{"-1G", 0, true},
		{"99999999999999999T", 0, true},
	}
	for _, tc := range tests {
		got, err := parseMemMiB(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseMemMiB(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestMaxSubmitBytes(t *testing.T) {
	for in, want := range map[string]int64{"64M": 64 << 20, "1G": 1 << 30, "512": 512 << 20, "UNLIMITED": 0, "0": 0, "unlimited": 0, "": 0} {
		if got := (Limits{MaxSubmitSize: in}).MaxSubmitBytes(); got != want {
			t.Errorf("max_submit_size %q = %d bytes, want %d", in, got, want)
		}
		if got := (Limits{MaxSubmitSizePerUser: in}).MaxSubmitBytesPerUser(); got != want {
			t.Errorf("max_submit_size_per_user %q = %d bytes, want %d", in, got, want)
		}
	}
	c := Defaults()
	c.Limits.MaxSubmitSize = "UNLIMITED"
	if err := c.Validate(); err != nil {
		t.Errorf("max_submit_size = \"UNLIMITED\": %v", err)
	}
}

// [node] controller takes a comma-separated list of a controller group's
// addresses, each checked as a single one is.
func TestNodeControllerList(t *testing.T) {
	n := DefaultNode()
	n.Node.Controller = "https://c1:6817, https://c2:6817,https://c3:6817"
	if err := n.Validate(); err != nil {
		t.Errorf("a list of three https addresses: %v", err)
	}
}

// Every problem of [power] at once, each naming its key.
func TestPowerValidate(t *testing.T) {
	c := Defaults()
	c.Power = Power{ResumeProgram: "bin/resume", SuspendTime: "5m", ResumeTimeout: "soon", SuspendTimeout: "30s", ResumeRate: -1,
		SuspendExcNodes: []string{"gpu[3-"}, SuspendExcParts: []string{"nope"},
		Nodes: []PowerNode{{Names: "gpu[1-2]", CPUs: 0, Mem: "lots", GPUs: 8}, {Names: "gpu2", CPUs: 4, Mem: "1G"}}}
	err := c.Validate()
	if err == nil {
		t.Fatal("bad [power] passed")
	}
	for _, want := range []string{
		`[power] resume_program: "bin/resume" is not an absolute path`,
		"[power] suspend_time: 5m is set but suspend_program is empty",
		`[power] resume_timeout: "soon" is not a duration`,
		"resume_rate, suspend_rate: -1, 0 must not be negative",
		`[power] suspend_exc_nodes: "gpu[3-"`,
		`[power] suspend_exc_parts: "nope" is not a [[partition]]`,
		`[[power.nodes]] "gpu[1-2]" cpus: 0 must be at least 1`,
		`[[power.nodes]] "gpu[1-2]" mem: "lots" is not a memory size`,
		`[[power.nodes]] "gpu[1-2]" gpu_model: empty`,
		`[[power.nodes]] "gpu2" names: node gpu2 is declared twice`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	c = Defaults()
	c.Power = Power{ResumeProgram: "/r", SuspendProgram: "/s", SuspendTime: "10m", ResumeTimeout: "60s", SuspendTimeout: "30s",
		SuspendExcNodes: []string{"gpu[1-2]"}, Nodes: []PowerNode{{Names: "gpu[3-6]", CPUs: 64, Mem: "512G", GPUs: 8, GPUModel: "h100"}}}
	if err := c.Validate(); err != nil {
		t.Fatalf("good [power]: %v", err)
	}
	if got := c.Power.Nodes[0].ExpandNames(); len(got) != 4 || got[3] != "gpu6" {
		t.Errorf("ExpandNames = %v", got)
	}
}
