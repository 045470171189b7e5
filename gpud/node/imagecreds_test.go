package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNetrc(t *testing.T) {
	got := parseNetrc([]byte(`machine nvcr.io login $oauthtoken password nvapi-secret
machine 127.0.0.1:5000
  login alice
  password "quoted"
default login any password every-host
machine nologin.example password x
`))
	want := map[string][2]string{"nvcr.io": {"$oauthtoken", "nvapi-secret"}, "127.0.0.1:5000": {"alice", `"quoted"`}}
	if len(got) != len(want) {
		t.Fatalf("parseNetrc = %v, want %v (no default, no entry without login)", got, want)
	}
	for h, c := range want {
		if got[h] != c {
			t.Errorf("parseNetrc[%s] = %v, want %v", h, got[h], c)
		}
	}
}

func TestParseDockerConfig(t *testing.T) {
	got, err := parseDockerConfig([]byte(`{"auths": {
		"https://index.docker.io/v1/": {"auth": "Ym9iOmh1bnRlcjI="},
		"reg.site:5000": {"username": "carol", "password": "pw"},
		"empty.example": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got["index.docker.io"] != [2]string{"bob", "hunter2"} || got["reg.site:5000"] != [2]string{"carol", "pw"} || len(got) != 2 {
		t.Fatalf("parseDockerConfig = %v", got)
	}
	if _, err := parseDockerConfig([]byte(`{"auths": {"x": {"auth": "%%%"}}}`)); err == nil || !strings.Contains(err.Error(), "base64") {
		t.Errorf("bad auth: err = %v", err)
	}
	if _, err := parseDockerConfig([]byte(`not json`)); err == nil {
		t.Error("bad JSON: no error")
	}
}

// TestUserCredentialsAreReadAsTheUser: the files are read by a process
// with the job user's IDs, so a file the user cannot read (another user's,
// through a symlink the user planted) is refused with the kernel's answer,
// not read by root; a missing file means no credentials; the enroot file
// wins over config.json for a host both name.
func TestUserCredentialsAreReadAsTheUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a process as another user")
	}
	const nobody = 65534
	ctx := context.Background()
	// Directories nobody can traverse (t.TempDir's parent is 0700).
	tmp := func() string {
		d, err := os.MkdirTemp("", "gpud-creds")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	home := tmp()
	if creds, err := userCredentials(ctx, nobody, nobody, nil, home); err != nil || creds != nil {
		t.Fatalf("no files: creds %v, err %v; want none, no error", creds != nil, err)
	}
	write := func(rel, data string, mode os.FileMode, uid int) {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	write(".config/enroot/.credentials", "machine reg.site login enroot password from-enroot\n", 0o600, nobody)
	write(".docker/config.json", `{"auths": {"reg.site": {"username": "docker", "password": "from-docker"}, "other.site": {"username": "d2", "password": "p2"}}}`, 0o600, nobody)
	creds, err := userCredentials(ctx, nobody, nobody, nil, home)
	if err != nil {
		t.Fatal(err)
	}
	if u, p, _ := creds("reg.site"); u != "enroot" || p != "from-enroot" {
		t.Errorf("reg.site = %s/%s, want the enroot file's", u, p)
	}
	if u, p, _ := creds("other.site"); u != "d2" || p != "p2" {
		t.Errorf("other.site = %s/%s, want config.json's", u, p)
	}
	if u, p, _ := creds("none.site"); u != "" || p != "" {
		t.Errorf("none.site = %s/%s, want anonymous", u, p)
	}
	// Another user's file (root's here), linked from this user's home.
	secret := filepath.Join(tmp(), "root-credentials")
	if err := os.WriteFile(secret, []byte("machine reg.site login root password root-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cred := filepath.Join(home, ".config/enroot/.credentials")
	if err := os.Remove(cred); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, cred); err != nil {
		t.Fatal(err)
	}
	_, err = userCredentials(ctx, nobody, nobody, nil, home)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") || strings.Contains(err.Error(), "root-secret") {
		t.Fatalf("symlink to root's file: err = %v; want permission denied, no secret", err)
	}
}
