package registry

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Lock is a snapshot of one tracked lock. It is a plain value: changing it
// changes nothing in the registry.
type Lock struct {
	// Client is the watched client the lock was obtained through.
	Client redis.UniversalClient
	// Key is the Redis key of the lock.
	Key string
	// Value is the value stored under Key (for redislock the token followed
	// by the metadata). Renewal is owner-checked against it.
	Value string
	// TTL is the expiry the holder asked for on its last obtain or refresh.
	TTL time.Duration
	// Source is the name of the adapter that recognised the lock.
	Source string
	// ObtainedAt is when the registry saw the lock obtained.
	ObtainedAt time.Time
	// ConfirmedAt is when Redis last confirmed that the lock is held with
	// TTL: the obtain, a refresh by the holder, or a renewal by the watchdog.
	ConfirmedAt time.Time
	// Renewals counts the watchdog's successful renewals.
	Renewals int64
}

// entry is the registry's own record of a lock; kept small because a
// process may track a million of them.
type entry struct {
	value     string
	ttl       time.Duration
	obtained  int64 // nanoseconds since Registry.epoch (monotonic)
	confirmed int64 // nanoseconds since Registry.epoch (monotonic)
	renewals  uint32
	source    uint8 // index into Registry.adapters
	detached  bool  // no longer in its table (released or dropped)
}

// Ref names a lock by key and value, and carries the TTL a renewal sent.
type Ref struct {
	Key   string
	Value string
	TTL   time.Duration

	// e is the entry the ref was planned from (see Registry.Plan), so that
	// Hold and Confirm need not look the key up again; nil otherwise.
	e *entry
}
