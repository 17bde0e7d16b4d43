package table

import (
	"time"
	"unsafe"
)

// Entry is the record of one tracked lock. It is kept to 64 bytes: a
// process may track a million of them. Entries are allocated by the table,
// eight at a time (see entryBlock).
//
// Key, Value and the slot never change once the entry is in a table (a new
// obtain with another value makes a new entry), so they may be read without
// a lock, for instance by go-redis while it writes a renew command. Every
// other field is guarded by the mutex of the entry's [Table]. The other
// keys of a lock over several keys live in the table ([Table.KeysLocked]).
type Entry struct {
	Key   string // the lock's Redis key (its first key for a lock over several keys)
	Value string // the value the lock is held with

	TTL       time.Duration // the expiry the holder last asked for
	Obtained  int64         // when the hook saw the obtain, in ns since the set's epoch
	Confirmed int64         // when Redis last confirmed TTL (obtain, refresh or renewal), ns since the epoch

	Renewals uint32 // the watchdog's successful renewals
	slot     uint16 // the cluster hash slot of Key (0 elsewhere); multiBit for a lock over several keys
	srcGen   uint8  // low 4 bits: index into the set's adapter names (Source); high 4: the schedule's generation (Gen)
	flags    Flags  // state bits, and in busyMask the holder commands on their way (see Table.Mark)
}

// MaxAdapters is how many adapters a set may have: an entry keeps the
// index of its adapter in 4 bits.
const MaxAdapters = 16

// Source returns the index of the entry's adapter in the set's names; the
// table must be locked.
func (e *Entry) Source() uint8 { return e.srcGen & 0x0F }

// Gen returns the entry's schedule generation, which the watchdog's
// schedule advances (NextGen) each time it gives the entry a slot: a slot
// of an older generation is stale. It wraps after 16; a stale slot taken
// for the live one is only looked at early. The table must be locked.
func (e *Entry) Gen() uint8 { return e.srcGen >> 4 }

// NextGen advances the entry's schedule generation and returns it; the
// table must be locked.
func (e *Entry) NextGen() uint8 {
	e.srcGen += 0x10
	return e.srcGen >> 4
}

// multiBit marks, in Entry.slot, a lock over several keys (slots fit in 14 bits).
const multiBit = 1 << 15

// Slot returns the cluster hash slot of the entry's key (0 on a client that
// is no cluster client).
func (e *Entry) Slot() uint16 { return e.slot &^ multiBit }

// Multi reports whether the lock holds several keys.
func (e *Entry) Multi() bool { return e.slot&multiBit != 0 }

// Flags are an entry's state bits; the high two bits count the holder's
// commands about the entry on their way to Redis.
type Flags uint8

const (
	// Detached: the entry is no longer in its table (released, dropped,
	// replaced by a new obtain with another value).
	Detached Flags = 1 << iota
	// InFlight: a renewal of the entry is on its way to Redis; Table.Mark
	// waits for it to end.
	InFlight
	// Queued: the entry is in an endpoint's schedule, to be looked at
	// again at a time of its own (the watchdog's fast lane or retries).
	Queued
	// Retry: the entry's last renewal failed; it is retried.
	Retry
	// Fresh: the entry cannot wait for the next tick, and its endpoint's
	// due loop lists it (then Queued) when it first looks at the table:
	// a lock released before then never enters a due list.
	Fresh
	// Ready: the entry is due and waits in its endpoint's ready queue (or
	// its list of hedged locks) to be sent: the sweep leaves it to that
	// queue.
	Ready

	busyOne  Flags = 1 << 6
	busyMask Flags = 0xC0
)

// The state of an entry is read and changed only through the methods
// below, each with the table locked: the watchdog's lanes move an entry
// through the renewal side's states (Queued, Retry, Fresh), the table
// through the others (InFlight in Hold, Settle, Release; Detached when it
// untracks it; the busy count in Mark and Unmark). Renewals the watchdog
// stopped waiting for (late ones) are counted by the table, not here.
// docs/state.md draws the state machine.

// Busy reports whether a holder's command about the entry is on its way
// to Redis.
func (e *Entry) Busy() bool { return e.flags&busyMask != 0 }

// State returns the entry's state bits, for a view of it.
func (e *Entry) State() Flags { return e.flags }

// Detached reports whether the entry is no longer tracked.
func (e *Entry) Detached() bool { return e.flags&Detached != 0 }

// InFlight reports whether a renewal of the entry is on its way, waited for.
func (e *Entry) InFlight() bool { return e.flags&InFlight != 0 }

// Queued reports whether the entry waits in its endpoint's schedule for
// the time it must be looked at again.
func (e *Entry) Queued() bool { return e.flags&Queued != 0 }

// IsReady reports whether the entry waits in its endpoint's ready queue.
func (e *Entry) IsReady() bool { return e.flags&Ready != 0 }

// MakeReady moves the entry from its endpoint's schedule (Queued) to its
// ready queue; it reports false when it was ready already.
func (e *Entry) MakeReady() bool {
	if e.flags&Ready != 0 {
		return false
	}
	e.flags = e.flags&^Queued | Ready
	return true
}

// Unready takes the entry out of the Ready state: it left the ready queue.
func (e *Entry) Unready() { e.flags &^= Ready }

// Retrying reports whether the entry's last renewal failed.
func (e *Entry) Retrying() bool { return e.flags&Retry != 0 }

// Fresh reports whether the entry waits, as a fresh lock, for its
// endpoint's due loop to list it.
func (e *Entry) Fresh() bool { return e.flags&Fresh != 0 }

// Enqueue puts the entry in the Queued state, for the caller to add it to
// its endpoint's schedule; it reports false when it was queued or ready
// already.
func (e *Entry) Enqueue() bool {
	if e.flags&(Queued|Ready) != 0 {
		return false
	}
	e.flags |= Queued
	return true
}

// Dequeue takes the entry out of the Queued, Ready and Retry states: it
// left its endpoint's schedule (untracked, given up, or the next tick is
// soon enough).
func (e *Entry) Dequeue() { e.flags &^= Queued | Ready | Retry }

// Unqueue takes the entry out of the Queued and Ready states, and keeps
// its Retry state: it leaves one endpoint's schedule for another's, or
// for a call.
func (e *Entry) Unqueue() { e.flags &^= Queued | Ready }

// Fail puts the entry in the Retry state: its renewal failed.
func (e *Entry) Fail() { e.flags |= Retry }

// MakeFresh puts the entry in the Fresh state; it reports false when it
// was fresh already.
func (e *Entry) MakeFresh() bool {
	if e.flags&Fresh != 0 {
		return false
	}
	e.flags |= Fresh
	return true
}

// Unfresh takes the entry out of the Fresh state; it reports whether it
// was fresh.
func (e *Entry) Unfresh() bool {
	if e.flags&Fresh == 0 {
		return false
	}
	e.flags &^= Fresh
	return true
}

// KeyArg returns Key as a go-redis command argument that costs no
// allocation ([StringArg]).
func (e *Entry) KeyArg() any { return StringArg(&e.Key) }

// ValueArg is [Entry.KeyArg] for Value.
func (e *Entry) ValueArg() any { return StringArg(&e.Value) }

// StringArg returns *s as a go-redis command argument that costs no
// allocation: a pointer that go-redis writes through
// encoding.BinaryMarshaler and prints, in cmd.String() and in tracing hooks,
// through fmt.Stringer, as the string itself. *s must not change while a
// command that carries it may be written.
func StringArg(s *string) any { return (*stringArg)(s) }

type stringArg string

// MarshalBinary returns the string's bytes without copying them; go-redis
// only reads them, while it writes the command.
func (a *stringArg) MarshalBinary() ([]byte, error) { return bytesOf(string(*a)), nil }

// String returns the string.
func (a *stringArg) String() string { return string(*a) }

// bytesOf returns s's bytes, shared with s: the caller must not change them.
func bytesOf(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
