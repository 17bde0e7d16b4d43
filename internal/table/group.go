package table

import (
	"slices"
	"sync"
	"time"
	"weak"
)

// A Group is the copies of one lock held on several Redis servers, each
// through its own watched client: the same key and value, obtained by one
// acquire (redsync's Redlock: one SET NX per pool). Servers counts every
// server the acquire tried, held or not, so that Quorum is a majority of the
// servers the acquire used, as redsync computes it.
//
// A lock held on one server has no group. A group is made when a second
// server sees the same key and value (an obtain, or an attempt that did
// not get the lock: another holder had it, or the command failed), or
// when an attempt fails first.
type Group struct {
	Key, Value string

	// Telling is held by whoever judges whether the lock, as a whole, is
	// to be told its quorum is no longer confirmed in time, so that two
	// judging at once tell it once. It is taken with no table locked.
	Telling sync.Mutex

	// The fields below are guarded by the set's group mutex.
	// servers are the servers the acquire tried, held weakly: a group
	// kept by a recent acquire (acquires) keeps no table, and no client,
	// alive. Its copies hold theirs, which track locks anyway.
	servers []weak.Pointer[Table]
	copies  []Copy // the copies held and tracked
	lost    bool   // given up: fewer than a majority held it, or max hold
}

// Copy is one copy of a group's lock: an entry and its table.
type Copy struct {
	T *Table
	E *Entry
}

// groups is a set's groups and its record of recent acquires.
type groups struct {
	mu       sync.Mutex
	byEntry  map[*Entry]*Group
	acquires map[string]*acquire // by key and value: groups being made
	purged   time.Time
}

// acquire keeps a group while its acquire's commands arrive: a group whose
// only servers so far said no has no copy to be found by, and the servers
// that said no must still count when the first copy comes.
type acquire struct {
	g  *Group
	at time.Time
}

// acquireTTL is how long an acquire's group is kept by its key and value:
// the commands of one acquire arrive within its timeout (redsync's expiry
// times its timeout factor).
const acquireTTL = 10 * time.Second

func groupKey(key, value string) string { return key + "\x00" + value }

// Quorum returns how many copies must stay held: a majority of the servers
// the acquire tried.
func (g *Group) Quorum() int { return len(g.servers)/2 + 1 }

// GroupOf returns e's group, or nil when e is held on one server.
func (s *Set) GroupOf(e *Entry) *Group {
	if s.grouped.Load() == 0 {
		return nil
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	return s.g.byEntry[e]
}

// GroupState returns how many copies of g are held, its quorum and the
// number of servers its acquire tried.
func (s *Set) GroupState(g *Group) (held, quorum, servers int) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	return len(g.copies), g.Quorum(), len(g.servers)
}

// link records that t saw key obtained (e, not nil) or attempted (e nil)
// with value, and puts it in a group with the other servers that saw the
// same key and value. It must be called without any table locked.
func (s *Set) link(t *Table, e *Entry, key, value string) {
	// Other servers' copies, looked up before the group mutex is taken
	// (the group mutex is taken with a table locked elsewhere, never the
	// other way round).
	var others []Copy
	for _, o := range s.Holding() {
		if o == t {
			continue
		}
		if oe := o.Get(key); oe != nil && oe.Value == value {
			others = append(others, Copy{o, oe})
		}
	}
	gk := groupKey(key, value)
	now := time.Now()
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.purgeLocked(now)
	var g *Group
	for _, c := range others {
		if g = s.g.byEntry[c.E]; g != nil {
			break
		}
	}
	if a := s.g.acquires[gk]; a != nil && g == nil {
		g = a.g
	}
	if g == nil && len(others) == 0 && e != nil {
		return // the first copy, on its own: a group only when a second server shows
	}
	if g == nil {
		g = &Group{Key: key, Value: value}
	}
	s.g.acquires[gk] = &acquire{g: g, at: now}
	for _, c := range others {
		g.addServer(c.T)
		s.addCopyLocked(g, c)
	}
	g.addServer(t)
	if e != nil {
		s.addCopyLocked(g, Copy{t, e})
	}
}

func (g *Group) addServer(t *Table) {
	w := weak.Make(t) // equal to every other weak pointer made of t
	for _, o := range g.servers {
		if o == w {
			return
		}
	}
	g.servers = append(g.servers, w)
}

func (s *Set) addCopyLocked(g *Group, c Copy) {
	if s.g.byEntry[c.E] == g {
		return
	}
	if s.g.byEntry == nil {
		s.g.byEntry = make(map[*Entry]*Group)
	}
	s.g.byEntry[c.E] = g
	g.copies = append(g.copies, c)
	s.grouped.Add(1)
}

// purgeLocked forgets acquires older than acquireTTL, at most once a
// second (their groups live on in their copies).
func (s *Set) purgeLocked(now time.Time) {
	if s.g.acquires == nil {
		s.g.acquires = make(map[string]*acquire)
	}
	if now.Sub(s.g.purged) < time.Second {
		return
	}
	s.g.purged = now
	for k, a := range s.g.acquires {
		if now.Sub(a.at) > acquireTTL {
			delete(s.g.acquires, k)
		}
	}
}

// unlink takes e out of its group, if it has one, because its holder ended
// it (released it). The group is forgotten with its last copy.
func (s *Set) unlink(e *Entry) {
	if s.grouped.Load() == 0 {
		return
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.removeCopyLocked(e)
}

func (s *Set) removeCopyLocked(e *Entry) *Group {
	g := s.g.byEntry[e]
	if g == nil {
		return nil
	}
	delete(s.g.byEntry, e)
	s.grouped.Add(-1)
	for i, c := range g.copies {
		if c.E == e {
			// In place, the copy's slot cleared (slices.Delete): a slot
			// left behind would keep its table, and its client, alive
			// as long as the group (a recent acquire keeps it).
			g.copies = slices.Delete(g.copies, i, i+1)
			break
		}
	}
	return g
}

// What the loss of one copy means for its group ([Set.CopyLost]).
const (
	// CopyOnly: a majority still holds the lock; it is not lost.
	CopyOnly = iota
	// GroupLost: the lock is lost now; report it once.
	GroupLost
	// AlreadyLost: the lock was reported lost before; say nothing.
	AlreadyLost
)

// CopyLost takes e, a copy the watchdog dropped, out of its group g. When
// fewer copies than g's quorum are left, or all is true (the whole lock
// must go, as at max hold), the group is lost: CopyLost says GroupLost,
// once per group, and returns the copies still held, which the caller must
// drop (and then Unlink). held, quorum and servers describe the group
// after the copy went.
func (s *Set) CopyLost(g *Group, e *Entry, all bool) (state int, rest []Copy, held, quorum, servers int) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.removeCopyLocked(e)
	held, quorum, servers = len(g.copies), g.Quorum(), len(g.servers)
	switch {
	case g.lost:
		return AlreadyLost, nil, held, quorum, servers
	case !all && held >= quorum:
		return CopyOnly, nil, held, quorum, servers
	}
	g.lost = true
	return GroupLost, append([]Copy(nil), g.copies...), held, quorum, servers
}

// Unlink takes e out of its group, if it has one.
func (s *Set) Unlink(e *Entry) { s.unlink(e) }

// doomed reports whether e is a copy of a lock lost as a whole that could
// not be dropped then (a command of its holder was on its way): the table
// drops it once that command is done. It takes the group mutex; the
// entry's table may be locked.
func (s *Set) doomed(e *Entry) bool {
	if s.grouped.Load() == 0 {
		return false
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	g := s.g.byEntry[e]
	return g != nil && g.lost
}

// Copies returns the copies of g held and tracked, and its quorum.
func (s *Set) Copies(g *Group) ([]Copy, int) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	return append([]Copy(nil), g.copies...), g.Quorum()
}
