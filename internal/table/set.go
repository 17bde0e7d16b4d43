package table

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Set is the tables of one registry, one per watched client.
type Set struct {
	Epoch time.Time // origin of the entries' monotonic times
	Names []string  // adapter names, indexed by Entry.Source
	// Probe runs every adapter's probe: the version guard.
	Probe func(context.Context) error

	// The set holds its tables weakly, and through them their clients: a
	// client the application drops, with no lock tracked on it, is
	// collected, and its table leaves the set (see member). The hook on
	// the client holds its table; the table holds its client.
	mu      sync.Mutex      // guards clients, others, order and gone
	clients map[any]*member // by a weak pointer to the client (clientKey)
	others  []*member       // tables of clients of other types, found by comparison
	order   []*member       // in Watch order, members gone included until compacted
	gone    int             // members of order that are gone
	count   atomic.Int32    // members not gone, read without mu

	obs atomic.Pointer[observerBox]

	g       groups       // locks held on several servers (group.go)
	grouped atomic.Int64 // entries in a group: none, the usual case, costs nothing

	// OnDrop, when set (by the registry, before any table is added), is
	// called when the watchdog untracks an entry, with a snapshot of it.
	OnDrop func(Info)

	// Panics counts the panics of the registry's subscribers, recovered.
	Panics  atomic.Int64
	onPanic atomic.Pointer[func(what string, p any)]
}

// Panicked counts a recovered panic of user code named what, and tells
// the function OnPanic set (the watchdog logs it).
func (s *Set) Panicked(what string, p any) {
	s.Panics.Add(1)
	if f := s.onPanic.Load(); f != nil {
		(*f)(what, p)
	}
}

// OnPanic sets what Panicked calls besides counting; nil: nothing.
func (s *Set) OnPanic(f func(what string, p any)) {
	if f == nil {
		s.onPanic.Store(nil)
		return
	}
	s.onPanic.Store(&f)
}

// Observer learns about changes the hook makes. Its methods run on the
// goroutine that sent the lock command: they must be quick and must not
// block. ChangedLocked runs with the table locked, the others without any
// table lock held.
type Observer interface {
	// ChangedLocked: e was obtained, obtained again or refreshed; its TTL
	// and Confirmed are new. t is locked, so that what the observer reads
	// of e and what it decides are part of the change: it must not lock t
	// and may take only locks that come after the table's. It returns
	// true when it needs Changed too (to do what it cannot do under the
	// table lock).
	ChangedLocked(t *Table, e *Entry) (later bool)
	// Changed: ChangedLocked asked for it; t is not locked.
	Changed(t *Table, e *Entry)
	// Ended: e stopped being tracked because of the holder: released, or
	// refreshed with the answer that it is not held. told: it was marked
	// told (TellLocked) then.
	Ended(t *Table, e *Entry, how End, told bool)
	// Taken: old, tracked under a key, lost it: the key was obtained
	// through t with another value. info is old's snapshot, taken before
	// it was untracked. Taken is called before the new lock is linked
	// into a group and before Changed hears of it.
	Taken(t *Table, old *Entry, info Info)
	// CopyNotHeld: e, a copy of g's lock on t's server, stopped being
	// tracked because the holder's refresh answered it is not held there;
	// it is still in g. told: e was marked told (TellLocked,
	// TellGroupLocked) then.
	CopyNotHeld(t *Table, e *Entry, g *Group, told bool)
	// Contended: a key e tracks on t was obtained with another value
	// through another watched client. When both clients reach the same
	// server, e's owner lost it: the observer asks Redis (a renewal of e
	// now) rather than guess, for the clients may reach different servers.
	Contended(t *Table, e *Entry)
}

// End says why the holder's command ended an entry.
type End uint8

const (
	// Released: the holder released the lock (or tried to).
	Released End = iota + 1
	// NotHeld: the holder's refresh answered that the lock is not held.
	NotHeld
)

type observerBox struct{ o Observer }

// NewSet returns an empty set for adapters with the given names; probe
// runs their version probes (the guard watchdog.Attach runs first).
func NewSet(names []string, probe func(context.Context) error) *Set {
	return &Set{Epoch: time.Now(), Names: names, Probe: probe, clients: make(map[any]*member)}
}

// A member is a table's place in its set. The set refers to the table
// weakly, and strongly (pin) only while it tracks locks: the watchdog
// renews them through its client, which must not go. A table nothing
// else refers to (its client, whose hook holds it, was dropped by the
// application) is collected, and a cleanup then takes its member out of
// the set.
type member struct {
	t   weak.Pointer[Table]
	key any // the member's key in Set.clients; nil for a member of Set.others
	// pin is the table while it tracks locks and is in the set: it is
	// set and cleared with the table locked (Table.keepLocked).
	pin  atomic.Pointer[Table]
	gone bool // out of the set; guarded by the set's mu
}

// clientKey returns the key of c's member in Set.clients: a weak pointer
// to c, which does not keep it alive, for the clients go-redis makes
// (*redis.Client, *redis.ClusterClient, *redis.Ring). Clients of other
// types (wrappers implementing redis.UniversalClient) have none: their
// members are found by comparing clients (sameClient).
func clientKey(c redis.UniversalClient) (key any, ok bool) {
	switch c := c.(type) {
	case *redis.Client:
		return weak.Make(c), true
	case *redis.ClusterClient:
		return weak.Make(c), true
	case *redis.Ring:
		return weak.Make(c), true
	}
	return nil, false
}

// sameClient reports whether a and b are the same client; clients of a
// type that cannot be compared are never the same.
func sameClient(a, b redis.UniversalClient) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// findLocked returns c's member, or nil; s.mu is held.
func (s *Set) findLocked(c redis.UniversalClient) *member {
	if k, ok := clientKey(c); ok {
		return s.clients[k]
	}
	for _, m := range s.others {
		if t := m.t.Value(); t != nil && sameClient(t.Client, c) {
			return m
		}
	}
	return nil
}

// dropLocked takes m out of the set; s.mu is held.
func (s *Set) dropLocked(m *member) {
	if m.gone {
		return
	}
	m.gone = true
	if m.key != nil {
		if s.clients[m.key] == m {
			delete(s.clients, m.key)
		}
	} else {
		for i, o := range s.others {
			if o == m {
				s.others = slices.Delete(s.others, i, i+1)
				break
			}
		}
	}
	s.gone++
	s.count.Add(-1)
	// The members gone are compacted away once they are half of order,
	// which keeps the cost of each at a constant; the map is made anew
	// with them, for Go maps never give memory back.
	if s.gone > len(s.order)/2 {
		live := make([]*member, 0, len(s.order)-s.gone)
		clients := make(map[any]*member, len(s.clients))
		for _, o := range s.order {
			if !o.gone {
				live = append(live, o)
				if o.key != nil {
					clients[o.key] = o
				}
			}
		}
		s.order, s.gone, s.clients = live, 0, clients
	}
}

// collected is the cleanup of a table collected: its member leaves the set.
func (s *Set) collected(m *member) {
	s.mu.Lock()
	s.dropLocked(m)
	s.mu.Unlock()
}

// Observe makes o the set's observer (nil: none). It returns the observer
// it replaced.
func (s *Set) Observe(o Observer) Observer {
	var box *observerBox
	if o != nil {
		box = &observerBox{o}
	}
	if old := s.obs.Swap(box); old != nil {
		return old.o
	}
	return nil
}

func (s *Set) observer() Observer {
	if b := s.obs.Load(); b != nil {
		return b.o
	}
	return nil
}

// Add returns c's table, making it when c has none; added says whether it
// was made now. The set does not keep the table alive while it tracks no
// lock: the caller (the registry's hook on c) must.
func (s *Set) Add(c redis.UniversalClient) (t *Table, added bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.findLocked(c); m != nil {
		if t := m.t.Value(); t != nil {
			return t, false
		}
		s.dropLocked(m) // its table went while c lives: nothing referred to it
	}
	_, cluster := c.(*redis.ClusterClient)
	t = &Table{Client: c, Cluster: cluster, set: s, locks: make(map[string]*Entry)}
	t.cond.L = &t.mu
	if cluster {
		t.slots = make([]int32, SlotCount)
	}
	m := &member{t: weak.Make(t)}
	if k, ok := clientKey(c); ok {
		m.key = k
		s.clients[k] = m
	} else {
		s.others = append(s.others, m)
	}
	t.m = m
	s.order = append(s.order, m)
	s.count.Add(1)
	runtime.AddCleanup(t, s.collected, m)
	return t, true
}

// Remove takes t out of the set: its client is no longer watched. The hook
// on the client stays (go-redis cannot remove one) but records nothing.
func (s *Set) Remove(t *Table) {
	s.mu.Lock()
	if t.m != nil {
		s.dropLocked(t.m)
	}
	s.mu.Unlock()
	t.mu.Lock()
	t.removed = true
	t.keepLocked()
	t.cond.Broadcast()
	t.mu.Unlock()
}

// watched returns how many tables the set has (some of which may have
// been collected, their members not yet taken out).
func (s *Set) watched() int { return int(s.count.Load()) }

// Tables returns the set's tables in the order they were added.
func (s *Set) Tables() []*Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Table, 0, len(s.order)-s.gone)
	for _, m := range s.order {
		if m.gone {
			continue
		}
		if t := m.t.Value(); t != nil {
			out = append(out, t)
		}
	}
	return out
}

// Holding returns the set's tables that track locks, in the order they
// were added: the tables the set keeps alive. The others have no entry to
// find, renew or list.
//
// The list is allocated before the set's lock is taken: a goroutine that
// allocates may be drafted into the collector's work (tens of
// milliseconds in a starved process), and would hold the lock that long.
func (s *Set) Holding() []*Table {
	s.mu.Lock()
	n := len(s.order)
	s.mu.Unlock()
	out := make([]*Table, 0, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.order {
		if t := m.pin.Load(); t != nil && !m.gone {
			out = append(out, t)
		}
	}
	return out
}

// AnyHolding reports whether some table of the set tracks locks, as
// len(Holding()) > 0 does, without allocating (the watchdog's wake probe
// asks every few milliseconds).
func (s *Set) AnyHolding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.order {
		if t := m.pin.Load(); t != nil && !m.gone {
			return true
		}
	}
	return false
}

// Lookup returns c's table, or nil.
func (s *Set) Lookup(c redis.UniversalClient) *Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.findLocked(c); m != nil {
		return m.t.Value()
	}
	return nil
}

// contend tells o of the entries of the other tables that track key with
// another value than value, which t has just seen obtained.
func (s *Set) contend(t *Table, key, value string, o Observer) {
	for _, ot := range s.Holding() {
		if ot == t {
			continue
		}
		if oe := ot.Get(key); oe != nil && oe.Value != value {
			o.Contended(ot, oe)
		}
	}
}

// Since converts t to the entries' time base.
func (s *Set) Since(t time.Time) int64 { return int64(t.Sub(s.Epoch)) }

// Now is Since(time.Now()) from the monotonic clock alone, which costs half
// as much as time.Now on the hook's path.
func (s *Set) Now() int64 { return int64(time.Since(s.Epoch)) }

// At converts a time of the entries' base back.
func (s *Set) At(ns int64) time.Time { return s.Epoch.Add(time.Duration(ns)) }
