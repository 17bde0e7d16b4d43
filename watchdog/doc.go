// Package watchdog keeps alive the Redis locks a [registry.Registry] tracks.
//
// [Attach] first runs each adapter's probe (the version guard: it refuses,
// with an error wrapping [registry.ErrUpstreamChanged], to renew for an
// upstream library whose scripts changed), then renews on a robfig/cron
// schedule until [Watchdog.Stop].
//
// # When a lock is renewed
//
// On each tick every tracked lock that passes the filter ([WithFilter]) is
// renewed, client by client, with an owner-checked multi-key script
// ([scripts.Renew]): [DefaultChunkSize] keys a call, two calls a pipeline,
// six pipelines at once, listed and sent a batch of locks at a time; on a
// cluster client no call spans two hash slots, and each master node has
// pipelines of its own, so a slow or dead node delays no other. A failed
// call delays no other call of its tick. A lock whose TTL would fall below a third before the next tick
// is also renewed between ticks by the fast lane: a single goroutine with a
// single timer renews each such lock when a third of its TTL has passed
// since Redis last confirmed it. A lock held longer than the max hold
// ([WithMaxHold]) is no longer renewed.
//
// # When a lock is lost
//
// A renewal that finds the key gone or holding another value untracks the
// lock and reports it ([WithOnLost], [ErrLockGone], [ErrLockTaken]), unless
// the holder's release of it is on its way to Redis (the registry's hook
// marks a release before sending it). A
// renewal that fails (timeout, connection error) is retried through the
// fast lane until the lock's TTL since its last confirmed renewal has
// passed; then the lock is untracked and reported with [ErrUnreachable].
// The watchdog never creates a key, never changes a value, and never sends
// a renewal for a lock whose release has returned.
//
// # Observability
//
// [Watchdog.Stats] returns counters; [WithLogger] takes a *slog.Logger
// (nothing is logged by default).
package watchdog
