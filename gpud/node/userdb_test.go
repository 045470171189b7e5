package node

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestUserDBCache: answers are reused within the TTL, asked again after
// it, and dropped at once when a watched file changes (useradd's rename:
// another inode; an edit in place: another size or mtime). Unknown users
// are cached, failed lookups are not.
func TestUserDBCache(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	if err := os.WriteFile(passwd, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	db := newUserDB(10*time.Second, func() time.Time { return now }, passwd, filepath.Join(dir, "group-missing"))
	asked := map[uint32]int{}
	home := "/home/v1"
	db.look = func(uid uint32) userEntry {
		asked[uid]++
		switch uid {
		case 7:
			return userEntry{err: user.UnknownUserIdError(7)}
		case 8:
			return userEntry{err: errors.New("nss backend down")}
		}
		return userEntry{home: home, groups: []uint32{uid, 100}}
	}
	check := func(step string, uid uint32, wantHome string, wantAsked int) {
		t.Helper()
		e := db.lookup(uid)
		if e.home != wantHome || asked[uid] != wantAsked {
			t.Fatalf("%s: uid %d: home %q after %d lookups; want %q after %d", step, uid, e.home, asked[uid], wantHome, wantAsked)
		}
	}
	check("first", 1000, "/home/v1", 1)
	home = "/home/v2"
	check("within the TTL", 1000, "/home/v1", 1)
	now = now.Add(10 * time.Second)
	check("TTL passed", 1000, "/home/v2", 2)

	// An edit in place (same inode, other size).
	home = "/home/v3"
	if err := os.WriteFile(passwd, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("passwd edited", 1000, "/home/v3", 3)
	// A rename over it, as useradd and userdel do (other inode; same size).
	home = "/home/v4"
	tmp := passwd + "+"
	if err := os.WriteFile(tmp, []byte("a\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, passwd); err != nil {
		t.Fatal(err)
	}
	check("passwd replaced", 1000, "/home/v4", 4)
	check("then cached", 1000, "/home/v4", 4)
	// A watched file that appears counts as a change too.
	home = "/home/v5"
	if err := os.WriteFile(filepath.Join(dir, "group-missing"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check("group file appeared", 1000, "/home/v5", 5)

	check("unknown user", 7, "", 1)
	check("unknown user again", 7, "", 1)
	check("failed lookup", 8, "", 1)
	check("failed lookup is asked again", 8, "", 2)

	// A clock stepped back does not make an entry fresh forever.
	now = now.Add(-time.Hour)
	home = "/home/v6"
	check("clock stepped back", 1000, "/home/v6", 6)
}

// TestUserDBRealAccounts: through NSS and the real /etc/passwd, a user
// added is seen at its next job start and a removed one is gone at once,
// though both were cached (TTL far from over).
func TestUserDBRealAccounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (loud): needs root for useradd/userdel")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("SKIP (loud): useradd not found (apt-get install passwd)")
	}
	db := newUserDB(time.Hour, time.Now, "/etc/passwd", "/etc/group")
	root := db.lookup(0)
	if root.err != nil || root.home == "" || !slices.Contains(root.groups, 0) {
		t.Fatalf("uid 0: %+v; want a home and group 0", root)
	}
	name := "gpududb" + strconv.Itoa(os.Getpid()%100000)
	_ = exec.Command("userdel", name).Run()
	if out, err := exec.Command("useradd", "--no-create-home", "--user-group", "--home-dir", "/nonexistent/"+name, name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v\n%s", err, out)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = exec.Command("userdel", name).Run()
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid64, _ := strconv.ParseUint(u.Uid, 10, 32)
	uid := uint32(uid64)
	if e := db.lookup(uid); e.err != nil || e.home != "/nonexistent/"+name {
		t.Fatalf("new user %s (uid %d): %+v; want home /nonexistent/%s", name, uid, e, name)
	}
	if out, err := exec.Command("usermod", "--home", "/nonexistent/moved", name).CombinedOutput(); err != nil {
		t.Fatalf("usermod: %v\n%s", err, out)
	}
	if e := db.lookup(uid); e.home != "/nonexistent/moved" {
		t.Fatalf("after usermod --home: %+v; want the new home at once", e)
	}
	if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
		t.Fatalf("userdel: %v\n%s", err, out)
	}
	removed = true
	var unknown user.UnknownUserIdError
	if e := db.lookup(uid); !errors.As(e.err, &unknown) {
		t.Fatalf("after userdel: %+v; want unknown user at once", e)
	}
}

// BenchmarkUserLookup is what a job start asks of the user database
// (homeDir and supplementaryGroups of one uid): through NSS each time, and
// through the cache.
func BenchmarkUserLookup(b *testing.B) {
	b.Run("nss", func(b *testing.B) {
		for b.Loop() {
			_ = lookupUserEntry(0)
			_ = lookupUserEntry(0)
		}
	})
	b.Run("cached", func(b *testing.B) {
		db := newUserDB(userDBTTL, time.Now, "/etc/passwd", "/etc/group")
		for b.Loop() {
			_ = db.lookup(0)
			_ = db.lookup(0)
		}
	})
}
