package table

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Set is the tables of one registry, one per watched client.
type Set struct {
	Epoch time.Time // origin of the entries' monotonic times
	Names []string  // adapter names, indexed by Entry.Source
	// Probe runs every adapter's probe: the version guard.
	Probe func(context.Context) error

	mu     sync.Mutex // guards tables and order
	tables map[redis.UniversalClient]*Table
	order  []*Table     // in Watch order
	count  atomic.Int32 // len(order), read without mu

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
	// refreshed with the answer that it is not held.
	Ended(t *Table, e *Entry, how End)
	// Taken: old, tracked under a key, lost it: the key was obtained
	// through t with another value. info is old's snapshot, taken before
	// it was untracked. Taken is called before the new lock is linked
	// into a group and before Changed hears of it.
	Taken(t *Table, old *Entry, info Info)
	// CopyNotHeld: e, a copy of g's lock on t's server, stopped being
	// tracked because the holder's refresh answered it is not held there;
	// it is still in g.
	CopyNotHeld(t *Table, e *Entry, g *Group)
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
	return &Set{Epoch: time.Now(), Names: names, Probe: probe, tables: make(map[redis.UniversalClient]*Table)}
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
// was made now.
func (s *Set) Add(c redis.UniversalClient) (t *Table, added bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tables[c]; t != nil {
		return t, false
	}
	_, cluster := c.(*redis.ClusterClient)
	t = &Table{Client: c, Cluster: cluster, set: s, locks: make(map[string]*Entry)}
	t.cond.L = &t.mu
	if cluster {
		t.slots = make([]int32, SlotCount)
	}
	s.tables[c] = t
	s.order = append(s.order, t)
	s.count.Store(int32(len(s.order)))
	return t, true
}

// Remove takes t out of the set: its client is no longer watched. The hook
// on the client stays (go-redis cannot remove one) but records nothing.
func (s *Set) Remove(t *Table) {
	s.mu.Lock()
	if s.tables[t.Client] == t {
		delete(s.tables, t.Client)
	}
	for i, o := range s.order {
		if o == t {
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			s.count.Store(int32(len(s.order)))
			break
		}
	}
	s.mu.Unlock()
	t.mu.Lock()
	t.removed = true
	t.cond.Broadcast()
	t.mu.Unlock()
}

// watched returns how many tables the set has.
func (s *Set) watched() int { return int(s.count.Load()) }

// Tables returns the set's tables in the order they were added.
func (s *Set) Tables() []*Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Table(nil), s.order...)
}

// Lookup returns c's table, or nil.
func (s *Set) Lookup(c redis.UniversalClient) *Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tables[c]
}

// contend tells o of the entries of the other tables that track key with
// another value than value, which t has just seen obtained.
func (s *Set) contend(t *Table, key, value string, o Observer) {
	for _, ot := range s.Tables() {
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
