// Package table is the machinery behind lockwatch's registry and watchdog:
// the table of locks tracked on each watched client, and the marks that
// order the watchdog's renewals around the holder's own commands.
//
// The registry's hook feeds a [Table] ([Table.Mark] before a lock command
// is sent, [Table.Apply] after it answered); the watchdog reads it
// ([Table.Walk]), holds entries while it renews them ([Table.Hold],
// [Table.Settle]) and drops the ones it finds lost ([Table.Drop]). Nothing
// here is part of lockwatch's API.
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

// Registry is how the watchdog reaches what a *registry.Registry keeps to
// itself; package registry sets it in its init. reg is a *registry.Registry.
var Registry struct {
	Set      func(reg any) *Set                       // the registry's tables
	Probe    func(ctx context.Context, reg any) error // runs every adapter's probe
	Adapters func(reg any) int                        // how many adapters it has
	// WithoutTracking marks the watchdog's own commands as
	// registry.WithoutTracking does, without the note that the
	// application uses the mark.
	WithoutTracking func(ctx context.Context) context.Context
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

// NewSet returns an empty set for adapters with the given names.
func NewSet(names []string) *Set {
	return &Set{Epoch: time.Now(), Names: names, tables: make(map[redis.UniversalClient]*Table)}
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

// Since converts t to the entries' time base.
func (s *Set) Since(t time.Time) int64 { return int64(t.Sub(s.Epoch)) }

// Now is Since(time.Now()) from the monotonic clock alone, which costs half
// as much as time.Now on the hook's path.
func (s *Set) Now() int64 { return int64(time.Since(s.Epoch)) }

// At converts a time of the entries' base back.
func (s *Set) At(ns int64) time.Time { return s.Epoch.Add(time.Duration(ns)) }

// Table is the locks tracked on one watched client, by key.
type Table struct {
	Client  redis.UniversalClient
	Cluster bool // Client is a *redis.ClusterClient: entries carry their slot
	set     *Set

	mu    sync.Mutex          // guards everything below and every entry's mutable fields
	locks map[string]*Entry   // by Key
	multi map[*Entry][]string // every key of the locks over several keys
	peak  int                 // the most locks since the map was last made
	spare []Entry             // the rest of the block new entries are taken from (newEntry)
	slots []int32             // cluster only: tracked locks per hash slot
	// cond is signalled when renewals end (InFlight cleared) or the table
	// is removed; Mark waits on it.
	cond    sync.Cond
	waiting int // goroutines waiting on cond
	removed bool
	// verdicts holds the watchdog's filter's verdicts on entries (true:
	// renew it), nil without a filter. The filter is user code: it runs
	// with no lock held, once per lock, and its verdict is kept here for
	// the renewals that need it under the table lock.
	verdicts map[*Entry]bool
}

// VerdictLocked returns the filter's verdict on e and whether it has one;
// the table must be locked.
func (t *Table) VerdictLocked(e *Entry) (ok, known bool) {
	ok, known = t.verdicts[e]
	return ok, known
}

// SetVerdictLocked records the filter's verdict on e, a tracked entry;
// the table must be locked.
func (t *Table) SetVerdictLocked(e *Entry, ok bool) {
	if e.Flags&Detached != 0 {
		return
	}
	if t.verdicts == nil {
		t.verdicts = make(map[*Entry]bool)
	}
	t.verdicts[e] = ok
}

// Set returns the set t belongs to.
func (t *Table) Set() *Set { return t.set }

// Removed reports whether t was taken out of its set.
func (t *Table) Removed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removed
}

// Len returns the number of tracked locks.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.locks)
}

// LenLocked is Len with the table locked.
func (t *Table) LenLocked() int { return len(t.locks) }

// shrinkAt is the table size below which the map is never made anew: a
// small table that fills and empties again and again (a batch of jobs that
// lock and unlock together) keeps its map, some 200 KB at most, rather
// than growing a new one every time.
const shrinkAt = 4096

// Mark tells t that a holder's command about the lock key held with value
// (a refresh, a release, or an obtain again with the same value) is about
// to be sent. Only the owner's own command marks its lock: a command that
// carries another value (another goroutine's obtain attempt) marks nothing
// and delays nothing. If a renewal of the entry is in flight, Mark waits
// until it ends or ctx is done, whichever comes first, so that the
// holder's command reaches Redis after it; until [Table.Unmark], the
// watchdog neither renews the entry nor reports it lost (the holder's
// command decides its fate). Mark returns the marked entry, or nil when
// key is not tracked with value.
//
// A renewal the watchdog stopped waiting for (Late) is waited for only by
// a refresh to a shorter TTL (ttl, when not 0): landing after it, it would
// undo the shortening (the renew script never shortens a TTL); a release
// or a longer refresh it cannot harm, and a holder waiting holds up the
// lock's renewals.
func (t *Table) Mark(ctx context.Context, key, value string, ttl time.Duration) *Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.locks[key]
	if e == nil || t.removed || e.Value != value {
		return nil
	}
	if e.Flags&busyMask != busyMask { // 3 at most: then the last Unmark ends the mark early
		e.Flags += busyOne
	}
	wait := InFlight
	if ttl > 0 && ttl < e.TTL {
		wait |= Late
	}
	if e.Flags&wait == 0 {
		return e
	}
	var stop func() bool
	if ctx != nil && ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			t.mu.Lock()
			t.cond.Broadcast()
			t.mu.Unlock()
		})
	}
	for e.Flags&wait != 0 && !t.removed && (ctx == nil || ctx.Err() == nil) {
		t.waiting++
		t.cond.Wait()
		t.waiting--
	}
	if stop != nil {
		stop()
	}
	return e
}

// Unmark ends a mark set by [Table.Mark]; e may be nil.
func (t *Table) Unmark(e *Entry) {
	if e == nil {
		return
	}
	t.mu.Lock()
	if e.Busy() {
		e.Flags -= busyOne
	}
	// A copy of a lock lost as a whole, left while its holder's command
	// was on its way, goes now.
	drop := !e.Busy() && e.Flags&Detached == 0 && t.set.doomed(e)
	if drop {
		t.detach(e)
		t.delete(e)
	}
	t.mu.Unlock()
	if drop {
		t.set.unlink(e)
	}
}

// Op is what a holder's command did, as the registry's adapters tell it.
type Op uint8

const (
	OpObtain  Op = iota + 1 // the holder now holds the lock
	OpRefresh               // the holder extended it
	OpNotHeld               // the holder learnt it does not hold it
	OpRelease               // the holder released it, or tried to
	OpAttempt               // the holder tried to obtain it and did not get it
)

// Change is one classified holder command.
type Change struct {
	Op     Op
	Key    string
	Keys   []string // every key of a lock over several keys; nil for one key
	Value  string
	TTL    time.Duration
	Source uint8
	// Snapshot, when not nil, receives a snapshot of the entry the change
	// concerned, taken under the table lock as the change was made (so
	// that an entry released keeps its keys in it).
	Snapshot *Info
}

// Apply records a holder's command and returns the entry it concerned (nil
// when it changed nothing) and whether the entry is still tracked. The
// observer hears of it: ChangedLocked with the table locked, the rest
// after the table lock is let go.
func (t *Table) Apply(c Change, now time.Time) (e *Entry, tracked bool) {
	if c.Op == OpAttempt {
		return t.attempt(&c)
	}
	return t.apply(&c, t.set.Since(now))
}

// ApplyNow is Apply at the present moment, read from the monotonic clock
// only when the change needs it. It takes c by pointer: it runs in the
// registry's hook, on the goroutine that sent the command, whose stack may
// be small.
func (t *Table) ApplyNow(c *Change) (e *Entry, tracked bool) {
	if c.Op == OpAttempt {
		return t.attempt(c)
	}
	return t.apply(c, t.set.Now())
}

// attempt records an obtain that did not get the lock: only a lock over
// several servers cares (how many servers its holder tried).
func (t *Table) attempt(c *Change) (e *Entry, tracked bool) {
	t.set.link(t, nil, c.Key, c.Value)
	return nil, false
}

// apply records a change other than an attempt, made at ns.
func (t *Table) apply(c *Change, ns int64) (e *Entry, tracked bool) {
	t.mu.Lock()
	if t.removed {
		t.mu.Unlock()
		return nil, false
	}
	old := t.locks[c.Key]
	if old != nil || c.Op != OpObtain || len(c.Keys) > 1 || c.Snapshot != nil {
		return t.applyLocked(c, ns, old)
	}
	// A lock over one key that is not tracked yet, the hook's most common
	// change, in short (applyLocked does the same, at more length).
	e = t.newEntry()
	e.Key, e.Value, e.TTL, e.Source = c.Key, c.Value, c.TTL, c.Source
	e.Obtained, e.Confirmed = ns, ns
	t.insert(e, c.Keys)
	o := t.set.observer()
	later := o != nil && o.ChangedLocked(t, e)
	t.mu.Unlock()
	if t.set.watched() > 1 {
		t.set.link(t, e, c.Key, c.Value)
	}
	if later {
		o.Changed(t, e)
	}
	return e, true
}

// applyLocked is apply with t locked (it unlocks it) and old the entry
// tracked under c.Key, if any.
func (t *Table) applyLocked(c *Change, ns int64, old *Entry) (e *Entry, tracked bool) {
	var ended, taken, swapped *Entry
	var how End
	var takenInfo Info
	fresh := false
	doomed := old != nil && old.Value == c.Value && (c.Op == OpObtain || c.Op == OpRefresh) && t.set.doomed(old)
	switch {
	case doomed:
		// A copy of a lock lost as a whole: the holder's refresh or obtain
		// of it keeps nothing tracked.
		t.detach(old)
		t.delete(old)
		ended, how = old, NotHeld
	case c.Op == OpObtain:
		switch {
		case old != nil && old.Value == c.Value && sameKeys(t.multi[old], c.Keys):
			old.TTL, old.Confirmed = c.TTL, ns
			e = old
		default:
			e = t.newEntry()
			*e = Entry{Key: c.Key, Value: c.Value, TTL: c.TTL, Obtained: ns, Confirmed: ns, Source: c.Source}
			if old != nil {
				if old.Value != c.Value {
					// Another owner has the key now: the old owner lost
					// it, and hears so before the new lock is tracked.
					taken, takenInfo = old, t.InfoLocked(old)
				} else {
					swapped = old
				}
				// The same value over other keys is the same owner: its
				// entry is made anew, its contexts and reports stay.
				t.detach(old)
				t.forget(old)
			}
			t.insert(e, c.Keys)
			fresh = true
		}
		tracked = true
	case c.Op == OpRefresh:
		if old != nil && old.Value == c.Value {
			old.TTL, old.Confirmed = c.TTL, ns
			e, tracked = old, true
		}
	case c.Op == OpNotHeld || c.Op == OpRelease:
		if old != nil && old.Value == c.Value {
			if c.Snapshot != nil {
				*c.Snapshot = t.InfoLocked(old)
			}
			t.detach(old)
			t.delete(old)
			e = old
			ended, how = old, Released
			if c.Op == OpNotHeld {
				how = NotHeld
			}
		}
	}
	if c.Snapshot != nil && e != nil && ended != e {
		*c.Snapshot = t.InfoLocked(e)
	}
	o := t.set.observer()
	later := false
	if tracked && o != nil {
		later = o.ChangedLocked(t, e)
	}
	t.mu.Unlock()
	if taken != nil && o != nil {
		o.Taken(t, taken, takenInfo)
	} else if taken != nil {
		t.set.unlink(taken)
	}
	if swapped != nil {
		t.set.unlink(swapped)
	}
	if ended != nil {
		// A copy of a lock over several servers that its holder's refresh
		// found not held is one copy lost: whether the lock is, the
		// observer (the watchdog) decides from the group.
		if g := t.set.GroupOf(ended); g != nil && how == NotHeld && o != nil {
			o.CopyNotHeld(t, ended, g)
			ended = nil
		} else {
			t.set.unlink(ended)
		}
	}
	if fresh && t.set.watched() > 1 {
		t.set.link(t, e, c.Key, c.Value)
	}
	if o != nil {
		if ended != nil {
			o.Ended(t, ended, how)
		}
		if later {
			o.Changed(t, e)
		}
	}
	return e, tracked
}

func sameKeys(have, keys []string) bool {
	if len(keys) <= 1 && have == nil {
		return true
	}
	if len(have) != len(keys) {
		return false
	}
	for i := range keys {
		if keys[i] != have[i] {
			return false
		}
	}
	return true
}

// entryBlock is how many entries are allocated together. A lock's entry
// is taken out of a block, so that tracking a lock costs an eighth of an
// allocation rather than one, on the holder's goroutine. Entries are never
// reused: a block's memory goes back once none of its entries is referred
// to any more. The price is that a long-held lock keeps its block alive: at
// most seven entries of released locks (448 bytes) and their keys and
// values, when the locks obtained just before and after it are released
// while it is held.
const entryBlock = 8

// newEntry returns a zeroed entry out of the current block, starting a new
// block when it is used up. Called with t.mu held.
func (t *Table) newEntry() *Entry {
	if len(t.spare) == 0 {
		t.spare = make([]Entry, entryBlock)
	}
	e := &t.spare[0]
	if len(t.spare) == 1 {
		t.spare = nil // not an empty slice into the block: it would keep the block
	} else {
		t.spare = t.spare[1:]
	}
	return e
}

// insert puts e, a lock over keys when there are several, in the map.
// Called with t.mu held; the key must be free (or hold an entry that was
// detached).
func (t *Table) insert(e *Entry, keys []string) {
	if t.Cluster {
		e.slot = SlotOf(e.Key)
		if old := t.locks[e.Key]; old != nil {
			t.slots[old.Slot()]--
		}
		t.slots[e.slot]++
	}
	if len(keys) > 1 {
		e.slot |= multiBit
		if t.multi == nil {
			t.multi = make(map[*Entry][]string)
		}
		t.multi[e] = keys
	}
	t.locks[e.Key] = e
	if n := len(t.locks); n > t.peak {
		t.peak = n
	}
}

// detach marks e as no longer tracked. Called with t.mu held.
func (t *Table) detach(e *Entry) {
	e.Flags |= Detached
	if t.verdicts != nil {
		delete(t.verdicts, e)
	}
}

// forget drops what the table keeps about e besides its map slot. Called
// with t.mu held.
func (t *Table) forget(e *Entry) {
	if e.Multi() {
		delete(t.multi, e)
	}
}

// KeysLocked returns every key of e's lock, nil for a lock over one key;
// the table must be locked. The slice must not be changed.
func (t *Table) KeysLocked(e *Entry) []string {
	if !e.Multi() {
		return nil
	}
	return t.multi[e]
}

// KeyCountLocked returns how many keys e's lock holds; the table must be
// locked.
func (t *Table) KeyCountLocked(e *Entry) int {
	if !e.Multi() {
		return 1
	}
	return len(t.multi[e])
}

// delete takes e out of the map if it is there, and makes the map anew when
// it has shrunk to a quarter of its largest size (Go maps never give memory
// back). Called with t.mu held.
func (t *Table) delete(e *Entry) {
	if t.locks[e.Key] != e {
		return
	}
	delete(t.locks, e.Key)
	t.forget(e)
	if t.Cluster {
		t.slots[e.Slot()]--
	}
	if n := len(t.locks); t.peak >= shrinkAt && n < t.peak/4 {
		m := make(map[string]*Entry, n)
		for k, v := range t.locks {
			m[k] = v
		}
		t.locks, t.peak = m, n
	}
}

// Get returns the entry tracked under key, or nil.
func (t *Table) Get(key string) *Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.locks[key]
}

// GetLocked is Get with the table locked.
func (t *Table) GetLocked(key string) *Entry { return t.locks[key] }

// Lock and Unlock take and let go of the table's mutex, for callers that
// read or change entries' guarded fields.
func (t *Table) Lock()   { t.mu.Lock() }
func (t *Table) Unlock() { t.mu.Unlock() }

// walkYield is how many entries Walk visits before it lets the table go for
// a moment, so that a large table never holds up the hook for long.
const walkYield = 4096

// Walk calls visit for every entry, with the table locked. When visit
// returns true, Walk lets the table go and calls pause, then goes on unless
// pause returned false. It also lets the table go briefly every few
// thousand entries. Entries added while Walk runs may or may not be
// visited; entries taken out before they are reached are not.
func (t *Table) Walk(visit func(e *Entry) bool, pause func() bool) {
	t.mu.Lock()
	n := 0
	for _, e := range t.locks {
		if e.Flags&Detached != 0 { // made anew while Walk was paused
			continue
		}
		n++
		if visit(e) {
			t.mu.Unlock()
			if !pause() {
				return
			}
			t.mu.Lock()
		} else if n%walkYield == 0 {
			t.mu.Unlock()
			t.mu.Lock()
		}
	}
	t.mu.Unlock()
}

// Each calls fn for every entry with the table locked, without pauses: for
// snapshots. fn must be quick.
func (t *Table) Each(fn func(e *Entry)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.locks {
		fn(e)
	}
}

// SlotCounts calls fn with the number of tracked locks per hash slot, with
// the table locked; nil on a client that is no cluster client.
func (t *Table) SlotCounts(fn func(counts []int32)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fn(t.slots)
}

// Hold keeps in es the entries that may be renewed now (still tracked, no
// holder command on its way, no renewal in flight), marks them in flight
// and returns them, in es's array. Every held entry must be passed to
// [Table.Settle] once.
func (t *Table) Hold(es []*Entry) []*Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.HoldLocked(es)
}

// HoldLocked is Hold with the table locked.
func (t *Table) HoldLocked(es []*Entry) []*Entry {
	out := es[:0]
	for _, e := range es {
		if e.Flags&(Detached|InFlight|busyMask) == 0 {
			e.Flags |= InFlight
			out = append(out, e)
		}
	}
	return out
}

// Renewal results, as Settle takes them.
const (
	Renewed int8 = 1  // Redis extended the lock
	Gone    int8 = 0  // a key of the lock does not exist
	Taken   int8 = -1 // a key holds another value
	Failed  int8 = 2  // no answer, or an error
)

// Settle ends the renewal of es (held by [Table.Hold]); res[i] is what
// happened to es[i], sent the time the renewal was sent. Renewed entries are
// confirmed at sent. Entries found gone or taken are dropped, unless a
// holder's command about them is on its way (it decides). fn, when not
// nil, is called with the table locked for every entry that was still
// tracked, with its index in es, its result and, when Settle dropped it, a
// snapshot of it taken before. Settle wakes holders waiting in [Table.Mark].
func (t *Table) Settle(es []*Entry, res []int8, sent int64, fn func(i int, e *Entry, r int8, dropped *Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, e := range es {
		e.Flags &^= InFlight
		r := res[i]
		if e.Flags&Detached != 0 {
			continue
		}
		var dropped *Info
		switch r {
		case Renewed:
			if sent > e.Confirmed {
				e.Confirmed = sent
			}
			e.Renewals++
		case Gone, Taken:
			if i, ok := t.Drop(e); ok {
				dropped = &i
			}
		}
		if fn != nil {
			fn(i, e, r, dropped)
		}
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// SettleLate applies the answer of a renewal the watchdog stopped waiting
// for (its entries were let go by [Table.Release] and may be in flight
// again, in a later renewal): an answer is the truth about Redis whenever
// it comes. A renewed entry is confirmed as of sent, when that is later
// than its last confirmation. An entry found gone or taken is dropped only
// when nothing confirmed it after sent and no later renewal of it is in
// flight (that one's answer is fresher). fn is as for [Table.Settle].
func (t *Table) SettleLate(es []*Entry, res []int8, sent int64, fn func(i int, e *Entry, r int8, dropped *Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLateLocked(es)
	for i, e := range es {
		r := res[i]
		if e.Flags&Detached != 0 {
			continue
		}
		var dropped *Info
		switch r {
		case Renewed:
			if sent > e.Confirmed {
				e.Confirmed = sent
				e.Renewals++
			}
		case Gone, Taken:
			if e.Confirmed > sent || e.Flags&InFlight != 0 {
				continue
			}
			if i, ok := t.Drop(e); ok {
				dropped = &i
			}
		default:
			continue
		}
		if fn != nil {
			fn(i, e, r, dropped)
		}
	}
}

// Release ends in-flight marks without a result: the watchdog stopped
// waiting for the renewal, which is Late until it ends (its answer goes
// to [Table.SettleLate], its end without one to [Table.EndLate]).
func (t *Table) Release(es []*Entry) {
	t.mu.Lock()
	for _, e := range es {
		e.Flags = e.Flags&^InFlight | Late
	}
	t.mu.Unlock()
}

// EndLate ends the Late marks of es: their renewal ended without an
// answer to apply.
func (t *Table) EndLate(es []*Entry) {
	t.mu.Lock()
	t.endLateLocked(es)
	t.mu.Unlock()
}

func (t *Table) endLateLocked(es []*Entry) {
	for _, e := range es {
		e.Flags &^= Late
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// Drop untracks e unless it is already untracked or a holder's command
// about it is on its way, and returns a snapshot of it taken before (its
// keys included) and whether it did. Called with the table locked.
func (t *Table) Drop(e *Entry) (Info, bool) {
	if e.Flags&Detached != 0 || e.Busy() {
		return Info{}, false
	}
	i := t.InfoLocked(e)
	t.detach(e)
	t.delete(e)
	return i, true
}

// DropAll untracks every entry and returns them with snapshots of them.
func (t *Table) DropAll() ([]*Entry, []Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	es := make([]*Entry, 0, len(t.locks))
	out := make([]Info, 0, len(t.locks))
	for _, e := range t.locks {
		es = append(es, e)
		out = append(out, t.InfoLocked(e))
		t.detach(e)
	}
	t.locks = make(map[string]*Entry)
	t.multi = nil
	t.verdicts = nil
	t.peak = 0
	if t.slots != nil {
		clear(t.slots)
	}
	return es, out
}

// ClearFlags clears the given flags on every entry (a watchdog that stops
// leaves no entry queued in its lanes).
func (t *Table) ClearFlags(f Flags) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.locks {
		e.Flags &^= f
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// Info is a snapshot of an entry, for the registry's Lock.
type Info struct {
	Client      redis.UniversalClient
	Key         string
	Keys        []string
	Value       string
	TTL         time.Duration
	Source      string
	ObtainedAt  time.Time
	ConfirmedAt time.Time
	Renewals    int64
}

// InfoLocked returns a snapshot of e; the table must be locked.
func (t *Table) InfoLocked(e *Entry) Info {
	return Info{
		Client:      t.Client,
		Key:         e.Key,
		Keys:        t.KeysLocked(e),
		Value:       e.Value,
		TTL:         e.TTL,
		Source:      t.set.Names[e.Source],
		ObtainedAt:  t.set.At(e.Obtained),
		ConfirmedAt: t.set.At(e.Confirmed),
		Renewals:    int64(e.Renewals),
	}
}

// Info returns a snapshot of e.
func (t *Table) Info(e *Entry) Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.InfoLocked(e)
}
