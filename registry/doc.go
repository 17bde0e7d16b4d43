// Package registry keeps the table of Redis locks this process holds.
//
// A [Registry] learns about locks through a go-redis hook that
// [Registry.Watch] installs on each client the application locks with. The
// hook lets every command run unchanged, then asks the registry's adapters
// (one per upstream locking library, see the adapters directory) whether the
// finished command obtained, refreshed or released a lock, and records the
// answer. Business code does not change.
//
// # What the hook costs
//
// For a command that is not SET, EVAL or EVALSHA the hook compares one
// string and returns: no allocation, no lock. Only lock-shaped commands reach
// the adapters.
//
// # Who uses the table
//
// The watchdog package renews the locks in the table (through machinery
// that is not part of the API). Applications read snapshots with
// [Registry.Locks] and [Registry.Get] and may follow changes with
// [Registry.Subscribe].
//
// # Clients that come and go
//
// The registry does not keep a watched client alive. A client the
// application drops (a tenant's client, closed when the tenant goes idle)
// is collected once no lock is tracked on it, and leaves [Registry.Locks]
// and the watchdog's view; a client with a lock tracked on it is kept, for
// the watchdog renews the lock through it.
//
// # Ordering with the watchdog
//
// Before a lock script of a tracked key is sent (a refresh, a release, an
// obtain again), the hook waits for a renewal of that key that is in flight,
// so that the holder's command reaches Redis after it; until the command
// has answered, the watchdog neither renews the key nor reports it lost.
// Adapters tell the hook what a command will do before it is sent
// ([Command].Pending).
//
// # Errors
//
// [ErrUpstreamChanged] is wrapped by the *[UpstreamChangedError] an
// adapter's probe returns when the linked upstream library sends scripts
// lockwatch does not know.
package registry
