package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/safefs"
)

// A job's registry credentials are its user's, read from the user's own
// files on the node with the user's filesystem identity: the kernel applies
// the user's permissions (root never opens a path the user controls, and
// a home on NFS with root squashed still works), and the secret exists
// only in the agent's memory for the length of one pull: never in the
// job's spec, state.db, the outbox, a log line or the container.
//
// Files, as enroot and Docker keep them:
//   - ~/.config/enroot/.credentials: netrc lines, "machine HOST login USER
//     password SECRET" (enroot's; pyxis users have it already);
//   - ~/.docker/config.json: "auths": {"HOST": {"auth": base64(USER:SECRET)}}
//     or "username"/"password" (credential helpers are not run).
//
// The enroot file wins for a host both name.

// credFiles are the files read, relative to the user's home.
var credFiles = []string{".config/enroot/.credentials", ".docker/config.json"}

// maxCredBytes bounds what is read of each file.
const maxCredBytes = 256 << 10

// credTimeout bounds the reading process (a hung NFS home).
const credTimeout = 10 * time.Second

// userCredentials reads uid's registry credentials under home, as the
// user. A missing file is no error; an unreadable one is (the user should
// know why a pull went without them).
func userCredentials(ctx context.Context, uid, gid uint32, groups []uint32, home string) (runtime.Credentials, error) {
	if home == "" {
		return nil, nil
	}
	byHost := map[string][2]string{}
	for i := len(credFiles) - 1; i >= 0; i-- {
		path := filepath.Join(home, credFiles[i])
		b, err := readAsUser(ctx, uid, gid, groups, path)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		var got map[string][2]string
		if strings.HasSuffix(path, ".json") {
			got, err = parseDockerConfig(b)
		} else {
			got = parseNetrc(b)
		}
		if err != nil {
			return nil, fmt.Errorf("read registry credentials %s: %w", path, err)
		}
		for h, c := range got {
			byHost[h] = c
		}
	}
	if len(byHost) == 0 {
		return nil, nil
	}
	return func(host string) (string, string, error) {
		c, ok := byHost[host]
		if !ok && (host == "registry-1.docker.io" || host == "docker.io") {
			for _, alias := range []string{"docker.io", "registry-1.docker.io", "index.docker.io"} {
				if c, ok = byHost[alias]; ok {
					break
				}
			}
		}
		return c[0], c[1], nil
	}, nil
}

// readAsUser returns path's content as uid reads it, nil if it does not
// exist for uid. The file is opened on a thread whose filesystem identity
// is the user's (safefs.AsUser): the kernel judges every component of the
// path, symlinks the user planted included, with the user's rights.
func readAsUser(ctx context.Context, uid, gid uint32, groups []uint32, path string) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	// A hung NFS home must not hold the job forever: the wait is
	// bounded, and a stuck read is left to its thread.
	go func() {
		var r result
		r.err = safefs.AsUser(safefs.Cred{UID: uid, GID: gid, Groups: groups}, func() error {
			f, err := os.Open(path)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil
			}
			if err != nil {
				return err
			}
			defer f.Close()
			r.b, err = io.ReadAll(io.LimitReader(f, maxCredBytes))
			if err == nil && r.b == nil {
				r.b = []byte{}
			}
			return err
		})
		done <- r
	}()
	ctx, cancel := context.WithTimeout(ctx, credTimeout)
	defer cancel()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("read registry credentials %s as uid %d: %w", path, uid, r.err)
		}
		return r.b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("read registry credentials %s as uid %d: %w", path, uid, ctx.Err())
	}
}

// parseNetrc reads netrc tokens: machine HOST login USER password SECRET,
// in any order, on one line or several ("default" is skipped: a secret
// for every host is not one to hand any registry).
func parseNetrc(b []byte) map[string][2]string {
	out := map[string][2]string{}
	var host string
	var cur [2]string
	flush := func() {
		if host != "" && cur[0] != "" {
			out[host] = cur
		}
		host, cur = "", [2]string{}
	}
	f := strings.Fields(string(b))
	for i := 0; i < len(f); i++ {
		next := func() string {
			if i+1 < len(f) {
				i++
				return f[i]
			}
			return ""
		}
		switch f[i] {
		case "machine":
			flush()
			host = next()
		case "default":
			flush()
		case "login":
			cur[0] = next()
		case "password":
			cur[1] = next()
		case "account", "macdef":
			next()
		}
	}
	flush()
	return out
}

// parseDockerConfig reads a Docker config.json's auths.
func parseDockerConfig(b []byte) (map[string][2]string, error) {
	var cfg struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, errors.New("not a Docker config.json (bad JSON)")
	}
	out := map[string][2]string{}
	for host, a := range cfg.Auths {
		user, pass := a.Username, a.Password
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("auths[%q].auth is not base64", host)
			}
			user, pass, _ = strings.Cut(string(dec), ":")
		}
		host = strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")
		host, _, _ = strings.Cut(host, "/")
		if user != "" {
			out[host] = [2]string{user, pass}
		}
	}
	return out, nil
}
