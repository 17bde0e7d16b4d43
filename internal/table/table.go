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
	"crypto/sha1"
	"encoding/hex"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Table is the locks tracked on one watched client, by key.
type Table struct {
	Client  redis.UniversalClient
	Cluster bool // Client is a *redis.ClusterClient: entries carry their slot
	set     *Set
	m       *member // t's place in set, which keeps t alive while it tracks locks

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
	// late counts, per entry, the renewals the watchdog stopped waiting
	// for that have not ended (ReleaseLocked); told holds the entries whose
	// holders were told their lock may be lost, with the confirmation
	// they were told about (TellLocked); digests holds the SHA1 of the
	// values longer than DigestAbove (the renew call sends it instead);
	// lateUntil holds, per entry, how long a late renewal may have kept
	// its key (MayLiveUntilLocked); refreshing counts, per entry, the
	// holder's refreshes on their way (Mark). All five are empty in the
	// usual case.
	late       map[*Entry]int32
	refreshing map[*Entry]int32
	told       map[*Entry]int64
	digests    map[*Entry]*string
	lateUntil  map[*Entry]lateMark
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
	if e.flags&Detached != 0 {
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

// insert puts e, a lock over keys when there are several, in the map,
// with the digest of its value when it has one.
// Called with t.mu held; the key must be free (or hold an entry that was
// detached).
func (t *Table) insert(e *Entry, keys []string, digest string) {
	if digest != "" {
		if t.digests == nil {
			t.digests = make(map[*Entry]*string)
		}
		d := digest // allocated here, only for a value that has a digest
		t.digests[e] = &d
	}
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
	t.keepLocked()
}

// keepLocked makes t's set keep t, and with it its client, alive while t
// tracks locks (the watchdog renews them through the client), and only
// then: an empty table, and its client, may go when the application
// drops the client. Called with t.mu held, whenever the number of
// tracked locks may have gone from or to zero.
func (t *Table) keepLocked() {
	if t.m == nil {
		return
	}
	keep := len(t.locks) > 0 && !t.removed
	if kept := t.m.pin.Load() != nil; kept != keep {
		if keep {
			t.m.pin.Store(t)
		} else {
			t.m.pin.Store(nil)
		}
	}
}

// detach marks e as no longer tracked. Called with t.mu held.
func (t *Table) detach(e *Entry) {
	e.flags |= Detached
	if t.verdicts != nil {
		delete(t.verdicts, e)
	}
	if len(t.told) > 0 {
		delete(t.told, e)
	}
	if len(t.digests) > 0 {
		delete(t.digests, e)
	}
	if len(t.lateUntil) > 0 {
		delete(t.lateUntil, e)
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
	if len(t.locks) == 0 {
		t.keepLocked()
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
func (t *Table) Lock() { t.mu.Lock() }

func (t *Table) Unlock() { t.mu.Unlock() }

// TryLock locks the table if no one holds it, and reports whether it did.
// A caller that may be running inside a holder of the table's lock (a
// job's context asked from table.Mark) tries rather than waits.
func (t *Table) TryLock() bool { return t.mu.TryLock() }

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
		if e.flags&Detached != 0 { // made anew while Walk was paused
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
			runtime.Gosched() // the CPU too, not only the lock
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
	// Told: the entry was marked told (TellLocked, TellGroupLocked) since
	// Redis last confirmed it: its teller ends its contexts, or has.
	Told bool
}

// InfoLocked returns a snapshot of e; the table must be locked.
func (t *Table) InfoLocked(e *Entry) Info {
	_, told := t.told[e]
	return Info{
		Client:      t.Client,
		Key:         e.Key,
		Keys:        t.KeysLocked(e),
		Value:       e.Value,
		TTL:         e.TTL,
		Source:      t.set.Names[e.Source()],
		ObtainedAt:  t.set.At(e.Obtained),
		ConfirmedAt: t.set.At(e.Confirmed),
		Renewals:    int64(e.Renewals),
		Told:        told,
	}
}

// Info returns a snapshot of e.
func (t *Table) Info(e *Entry) Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.InfoLocked(e)
}

// DigestAbove is the length above which a lock's value is not sent in
// renew calls: its SHA1 (in hex, 40 bytes) is sent instead, and the renew
// script compares it with the SHA1 of the value Redis holds.
const DigestAbove = 128

// Digest returns the SHA1 of value in lower-case hex, as Redis's Lua
// redis.sha1hex computes it.
func Digest(value string) string {
	sum := sha1.Sum([]byte(value))
	return hex.EncodeToString(sum[:])
}

// DigestLocked returns the digest of e's value, "" when its value is sent
// as it is; the table must be locked.
func (t *Table) DigestLocked(e *Entry) string {
	if d := t.digestLocked(e); d != nil {
		return *d
	}
	return ""
}

// DigestArgLocked returns the digest of e's value as a command argument
// that costs no allocation ([StringArg]), nil when its value is sent as it
// is; the table must be locked.
func (t *Table) DigestArgLocked(e *Entry) any {
	if d := t.digestLocked(e); d != nil {
		return StringArg(d)
	}
	return nil
}

func (t *Table) digestLocked(e *Entry) *string {
	if len(e.Value) <= DigestAbove {
		return nil
	}
	return t.digests[e]
}
