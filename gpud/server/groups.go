package server

import (
	"os/user"
	"strconv"
	"sync"
	"time"
)

// groupsTTL is how long a user's group list is trusted: a user removed
// from a group loses a partition's allow_groups within it.
const groupsTTL = time.Minute

// groupCache resolves users' group names (controller.Caller.Groups) from
// the controller host's user database (NSS: files, LDAP, sssd), as
// Slurm's controller does for AllowGroups, and keeps them groupsTTL.
type groupCache struct {
	mu    sync.Mutex
	users map[uint32]groupEntry
	names map[string]string // gid → group name
}

type groupEntry struct {
	names []string
	at    time.Time
}

// maxGroupCache bounds the cache (a stream of tokens for made-up uids).
const maxGroupCache = 10000

// groupsOf returns the names of the groups of uid (primary gid
// included), never nil: a user unknown here has only its primary group,
// if that resolves.
func (s *Server) groupsOf(uid, gid uint32) []string {
	g := &s.groups
	now := s.now()
	g.mu.Lock()
	if e, ok := g.users[uid]; ok && now.Sub(e.at) < groupsTTL {
		g.mu.Unlock()
		return e.names
	}
	g.mu.Unlock()
	gids := []string{strconv.FormatUint(uint64(gid), 10)}
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		gids = append(gids, u.Gid)
		if more, err := u.GroupIds(); err == nil {
			gids = append(gids, more...)
		}
	}
	names := []string{}
	seen := map[string]bool{}
	for _, id := range gids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if n := g.name(id); n != "" {
			names = append(names, n)
		}
	}
	g.mu.Lock()
	if g.users == nil || len(g.users) >= maxGroupCache {
		g.users = map[uint32]groupEntry{}
	}
	g.users[uid] = groupEntry{names: names, at: now}
	g.mu.Unlock()
	return names
}

// name resolves gid to its group name ("" if it has none).
func (g *groupCache) name(gid string) string {
	g.mu.Lock()
	n, ok := g.names[gid]
	g.mu.Unlock()
	if ok {
		return n
	}
	if gr, err := user.LookupGroupId(gid); err == nil {
		n = gr.Name
	}
	g.mu.Lock()
	if g.names == nil || len(g.names) >= maxGroupCache {
		g.names = map[string]string{}
	}
	g.names[gid] = n
	g.mu.Unlock()
	return n
}
