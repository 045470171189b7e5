package node

import (
	"errors"
	"os"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// userDB answers what a job start asks of the node's user database (the
// job user's home directory and groups) from a short-lived cache: each
// answer is a getpwuid_r and a getgrouplist through NSS (cgo), which a
// node with many starts a second (gpud loadtest runs hundreds of agents in
// one process) would otherwise pay twice per start.
//
// A changed or removed user must not keep stale answers for long, so an
// entry is dropped
//   - at once when /etc/passwd or /etc/group changes (another inode after
//     useradd/usermod/userdel's rename, or another size or mtime): local
//     accounts, the common case, are never stale;
//   - after userDBTTL otherwise, which bounds the staleness of other NSS
//     sources (LDAP, sssd) that no local file reveals. Those sources cache
//     for far longer themselves (sssd's entry_cache_timeout is 90 minutes,
//     nscd's passwd positive-time-to-live 10 minutes), so 10 s adds
//     nothing a site would notice.
//
// Unknown users are cached too (the job then runs with its primary group
// and no home); other lookup errors (an NSS backend that failed) are not.
type userDB struct {
	ttl   time.Duration
	now   func() time.Time
	files []string // stamped for invalidation
	look  func(uid uint32) userEntry

	mu     sync.Mutex
	stamps []fileStamp
	m      map[uint32]userEntry
}

const userDBTTL = 10 * time.Second

// users is the process's user database cache: one per process, since the
// user database is the host's, not an agent's.
var users = newUserDB(userDBTTL, time.Now, "/etc/passwd", "/etc/group")

func newUserDB(ttl time.Duration, now func() time.Time, files ...string) *userDB {
	return &userDB{ttl: ttl, now: now, files: files, look: lookupUserEntry, m: map[uint32]userEntry{}}
}

// userEntry is one uid's answer: its home directory and all its group IDs
// (primary included), or err (user.UnknownUserIdError for no such user);
// groupsErr is a user whose groups could not be listed.
type userEntry struct {
	home      string
	groups    []uint32
	err       error
	groupsErr error
	at        time.Time
}

// fileStamp identifies one version of a file; the zero stamp is a file
// that is not there.
type fileStamp struct {
	ino, size uint64
	mtime     int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{size: uint64(fi.Size()), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// lookup returns uid's entry, from the cache while it is fresh.
func (db *userDB) lookup(uid uint32) userEntry {
	stamps := make([]fileStamp, len(db.files))
	for i, f := range db.files {
		stamps[i] = stampOf(f)
	}
	now := db.now()
	db.mu.Lock()
	if !slices.Equal(stamps, db.stamps) {
		clear(db.m)
		db.stamps = stamps
	}
	e, ok := db.m[uid]
	db.mu.Unlock()
	if ok && now.Sub(e.at) < db.ttl && !now.Before(e.at) {
		return e
	}
	e = db.look(uid)
	e.at = now
	var unknown user.UnknownUserIdError
	if (e.err == nil && e.groupsErr == nil) || errors.As(e.err, &unknown) {
		db.mu.Lock()
		// Only if the files did not change meanwhile (a newer stamp set
		// cleared the map): an answer read before a change is not kept.
		if slices.Equal(stamps, db.stamps) {
			db.m[uid] = e
		}
		db.mu.Unlock()
	}
	return e
}

// lookupUserEntry asks NSS about uid.
func lookupUserEntry(uid uint32) userEntry {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return userEntry{err: err}
	}
	e := userEntry{home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		e.groupsErr = err
		return e
	}
	for _, s := range ids {
		if g, err := strconv.ParseUint(s, 10, 32); err == nil {
			e.groups = append(e.groups, uint32(g))
		}
	}
	return e
}
