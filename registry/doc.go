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
// The watchdog package reads the table ([Registry.Range]), records its
// renewals ([Registry.Confirm]) and drops the locks it finds lost
// ([Registry.Drop]). Applications read snapshots with [Registry.Locks] and
// may follow changes with [Registry.Subscribe].
//
// # Errors
//
// [ErrUpstreamChanged] is wrapped by the *[UpstreamChangedError] an
// adapter's probe returns when the linked upstream library sends scripts
// lockwatch does not know.
package registry
