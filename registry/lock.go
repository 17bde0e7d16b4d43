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
	// Key is the Redis key of the lock; for a lock over several keys
	// (redislock's ObtainMulti), its first key.
	Key string
	// Keys are every key of a lock over several keys, in the order the
	// holder gave them (Keys[0] == Key); nil for a lock over one key. The
	// slice is shared: do not change it.
	Keys []string
	// Value is the value stored under the lock's keys (for redislock the
	// token followed by the metadata). Renewal is owner-checked against it.
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
