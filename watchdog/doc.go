// Package watchdog keeps alive the Redis locks a [registry.Registry] tracks.
//
// [Attach] first runs each adapter's probe (the version guard: it refuses,
// with an error wrapping [registry.ErrUpstreamChanged], to renew for an
// upstream library whose scripts changed), then renews on a robfig/cron
// schedule until [Watchdog.Stop].
//
// # Endpoints and lanes
//
// Every Redis endpoint the locks live on has a lane of its own: each
// watched client, and each master node of a cluster client (found through
// go-redis's slot map). A lane has its own goroutines, timer, pipelines and
// retries, so that a stalled, dead, slow or failing-over endpoint delays no
// renewal on another one. The goroutines are a fixed few per endpoint,
// whatever the number of locks, and a sender for each call in flight:
// senders wait for the next call of any lane, and a call that hangs holds
// only its own (a call no sender waits for starts one).
//
// # When a lock is renewed
//
// On each tick every lane renews every lock on its endpoint that passes the
// filter ([WithFilter]) and is not in the fast lane below ([Watchdog.Sweep]
// renews those too), with an owner-checked multi-key script (renew.lua,
// in package scripts): [DefaultChunkSize] keys a call, two calls in flight
// per endpoint, so that Redis serves the application's commands between
// them; on a cluster no call spans two hash slots. A
// lock whose TTL would fall below a third before the next tick is also
// renewed between ticks by its lane's due list (the fast lane): one timer
// per lane renews each such lock when a third of its TTL has passed since
// Redis last confirmed it. On a client with one endpoint, the hook leaves
// a new short lock out of the list until a third of its TTL has passed
// (when the lane would renew it), so that the many short locks
// released sooner cost the fast lane no more than a flag; the lane then
// lists those still held. A lock held longer than the max hold
// ([WithMaxHold]) is no longer renewed.
//
// The holder's own commands win: a refresh or release of a key whose
// renewal is in flight is sent after that renewal has answered (or been
// given up), and the renew script never shortens a TTL on Redis 7 and
// newer (GT), so a renewal never undoes the holder's refresh.
//
// # When a renewal fails
//
// A failed renewal is retried by its lane (after a tenth of the TTL, at most
// a second). While an endpoint fails, its lane tries it with one pipeline
// at a time, and its locks wait; a lock whose TTL since its last confirmed
// renewal has passed is given up and reported with an [*UnreachableError]
// (it matches [ErrUnreachable] and wraps the last cause: a timeout, a
// refused connection, a CLUSTERDOWN or TRYAGAIN reply...). On a cluster
// client a failing node makes the watchdog reload the slot map
// (ReloadState, at most every 250 ms) and route the node's locks again, so
// that locks whose keys survived on a promoted replica are renewed as soon
// as it answers; calls refused because their slot is being migrated are
// sent again one lock a call, which go-redis redirects (ASK, MOVED). A
// client the application closed is given up at once: its locks are
// reported (the cause is redis.ErrClosed) and it is no longer swept.
//
// # When a lock is lost
//
// A renewal that finds a key gone or holding another value untracks the
// lock and reports it ([WithOnLost], [ErrLockGone], [ErrLockTaken]), unless
// a command of its holder about it is on its way to Redis. OnLost is called
// on a goroutine of its own, once per lock, one call at a time, in the
// order the losses happened: a slow or panicking callback delays no
// renewal. The watchdog never creates a key, never changes a value, and
// never sends a renewal for a lock whose release has returned.
//
// # Observability
//
// [Watchdog.Stats] returns counters, overall and per endpoint (renewed,
// failed, lost, in the fast lane, down or not, the last error);
// [WithLogger] takes a *slog.Logger (nothing is logged by default), and
// every line about an endpoint names it. [Watchdog.AddObserver] tells an
// [Observer] (the metrics modules in extra/) what happens, a pipeline at a
// time. [Watchdog.Handler] serves a debug page (HTML or JSON) of the
// endpoints and the tracked locks; it never shows a lock's value.
//
// # Contexts
//
// [Watchdog.Context] hands a job a context that is cancelled, with the
// reason as its cause, when its lock stops being held.
package watchdog
