package table

import (
	"time"
	"unsafe"
)

// Entry is the record of one tracked lock. It is kept small: a process may
// track a million of them.
//
// Key and Value never change once the entry is in a table (a new obtain
// with another value makes a new entry), so they may be read without a lock,
// for instance by go-redis while it writes a renew command. Every other field
// is guarded by the mutex of the entry's [Table].
type Entry struct {
	Key   string // the lock's Redis key (its first key for a lock over several keys)
	Value string // the value the lock is held with

	TTL       time.Duration // the expiry the holder last asked for
	Obtained  int64         // when the hook saw the obtain, in ns since the set's epoch
	Confirmed int64         // when Redis last confirmed TTL (obtain, refresh or renewal), ns since the epoch

	ext *ext // nil for a lock over one key

	Renewals uint32 // the watchdog's successful renewals
	Slot     uint16 // the cluster hash slot of Key; 0 on other clients
	Source   uint8  // index into the set's adapter names
	Flags    Flags
	Busy     uint8 // holder commands about this key on their way to Redis (see Table.Mark)
}

// ext holds what only a few entries need.
type ext struct {
	keys []string // every key of a lock over several keys, keys[0] == Key
}

// Flags are an entry's state bits.
type Flags uint8

const (
	// Detached: the entry is no longer in its table (released, dropped,
	// replaced by a new obtain with another value).
	Detached Flags = 1 << iota
	// InFlight: a renewal of the entry is on its way to Redis; Table.Mark
	// waits for it to end.
	InFlight
	// Queued: the entry is in an endpoint's due list (the watchdog's fast
	// lane or retries).
	Queued
	// Retry: the entry's last renewal failed; it is retried.
	Retry
)

// Keys returns every key of the lock: nil for a lock over one key (Key).
// The slice must not be changed.
func (e *Entry) Keys() []string {
	if e.ext == nil {
		return nil
	}
	return e.ext.keys
}

// KeyCount returns how many keys the lock holds.
func (e *Entry) KeyCount() int {
	if e.ext == nil {
		return 1
	}
	return len(e.ext.keys)
}

// KeyArg returns Key as a go-redis command argument that costs no
// allocation: a pointer that go-redis writes through
// encoding.BinaryMarshaler and prints, in cmd.String() and in tracing hooks,
// through fmt.Stringer, as the key itself.
func (e *Entry) KeyArg() any { return (*keyArg)(e) }

// ValueArg is [Entry.KeyArg] for Value.
func (e *Entry) ValueArg() any { return (*valueArg)(e) }

type (
	keyArg   Entry
	valueArg Entry
)

// MarshalBinary returns the key's bytes without copying them; go-redis only
// reads them, while it writes the command.
func (a *keyArg) MarshalBinary() ([]byte, error) { return bytesOf(a.Key), nil }

// String returns the key.
func (a *keyArg) String() string { return a.Key }

// MarshalBinary returns the value's bytes without copying them.
func (a *valueArg) MarshalBinary() ([]byte, error) { return bytesOf(a.Value), nil }

// String returns the value.
func (a *valueArg) String() string { return a.Value }

// bytesOf returns s's bytes, shared with s: the caller must not change them.
func bytesOf(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
