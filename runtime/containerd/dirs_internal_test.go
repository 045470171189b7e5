package containerd

import (
	"os"
	"strings"
	"testing"
)

func TestParseDaemonArgs(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"/etc/containerd/config.toml": "version = 2\nroot = \"/data/ctd\"\nstate = \"/run/k8s/ctd\"\n[grpc]\n  address = \"/x.sock\"\n",
		"/opt/ctd/config.toml":        "version = 3\nstate = \"/srv/state\"\n",
		"/opt/ctd/bad.toml":           "root = [",
		"/opt/ctd/relative.toml":      "root = \"lib/ctd\"\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	noDefault := func(p string) ([]byte, error) {
		if p == defaultDaemonConfig {
			return nil, os.ErrNotExist
		}
		return read(p)
	}
	tests := []struct {
		name        string
		args        []string
		read        func(string) ([]byte, error)
		root, state string
		wantErr     string
	}{
		{name: "default config", args: []string{"containerd"}, read: read, root: "/data/ctd", state: "/run/k8s/ctd"},
		{name: "no config at all", args: []string{"containerd"}, read: noDefault},
		{name: "flags win", args: []string{"containerd", "--root", "/r", "--state=/s"}, read: read, root: "/r", state: "/s"},
		{name: "config flag", args: []string{"/usr/bin/containerd", "--config", "/opt/ctd/config.toml"}, read: read, state: "/srv/state"},
		{name: "short config flag, relative", args: []string{"containerd", "-c", "config.toml"}, read: read, state: "/srv/state"},
		{name: "config with =", args: []string{"containerd", "--config=/opt/ctd/config.toml", "--root", "/r"}, read: read, root: "/r", state: "/srv/state"},
		{name: "named config missing", args: []string{"containerd", "-c", "/nope.toml"}, read: read, wantErr: "/nope.toml"},
		{name: "bad config", args: []string{"containerd", "-c", "/opt/ctd/bad.toml"}, read: read, wantErr: "bad.toml"},
		{name: "relative root", args: []string{"containerd", "-c", "relative.toml"}, read: read, wantErr: "not absolute"},
		{name: "flag without value", args: []string{"containerd", "--state"}, read: noDefault},
	}
	for _, tc := range tests {
		root, state, err := parseDaemonArgs(tc.args, func() (string, error) { return "/opt/ctd", nil }, tc.read)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want one naming %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || root != tc.root || state != tc.state {
			t.Errorf("%s: %q, %q, %v; want %q, %q", tc.name, root, state, err, tc.root, tc.state)
		}
	}
}
