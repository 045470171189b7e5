package node

import (
	"errors"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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

// stampOf stats path (following a symlink, as os.Stat) into a stamp
// without allocating: every job start stamps the user database's files.
func stampOf(path string) fileStamp {
	var st unix.Stat_t
	for {
		err := unix.Stat(path, &st)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fileStamp{}
		}
		return fileStamp{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano()}
	}
}

// lookup returns uid's entry, from the cache while it is fresh.
func (db *userDB) lookup(uid uint32) userEntry {
	// On the stack for the node's two files: kept (cloned) only when
	// they changed.
	var buf [2]fileStamp
	stamps := buf[:0]
	for _, f := range db.files {
		stamps = append(stamps, stampOf(f))
	}
	now := db.now()
	db.mu.Lock()
	if !slices.Equal(stamps, db.stamps) {
		clear(db.m)
		db.stamps = slices.Clone(stamps)
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
