// Package goredsync teaches a [registry.Registry] the lock commands of
// github.com/go-redsync/redsync/v4 used through its go-redis v9 pool
// (github.com/go-redsync/redsync/v4/redis/goredis/v9).
//
//	reg := registry.New(goredsync.New())
//
// # What it recognises
//
// Mutex.Lock acquires with a plain SET key value PX|EX n NX, which the
// application may send too. [Adapter.Classify] tells them apart by the call
// stack: the registry asks adapters on the goroutine that sent the command,
// and redsync's own functions are on that stack when redsync acquires. The
// stack is only walked for a SET with NX and an expiry that succeeded, which
// costs a few microseconds; every other command is decided from its name and
// arguments alone.
//
// Mutex.Extend and Mutex.Unlock run Lua scripts: EVALSHA with the script's
// SHA1, and EVAL with its source when Redis answers NOSCRIPT. Classify tells
// them apart by the SHA1 (of the source, for EVAL):
//
//   - touch and touchWithSetNX (Extend): the TTL is updated on 1, the lock
//     untracked on 0;
//   - delete (Unlock, and Lock after a failed quorum): the lock is untracked
//     when the value matches, whatever Redis answered.
//
// Asked before a command is sent ([registry.Command] Pending), Classify
// answers what a script will be if it succeeds; a SET is then nothing, since
// only its reply and its caller tell a lock.
//
// Locks of a mutex over several pools are tracked per watched client, one
// entry on each node where the SET succeeded.
//
// # Pinned scripts and the probe
//
// The adapter knows the SHA1s of the scripts of redsync v4.12.1 to v4.18.1
// (they did not change over those releases), as package
// github.com/lockwatch/lockwatch/scripts pins them. A later redsync with different
// scripts would lock in ways the registry does not see, so [Adapter.Probe]
// runs the linked redsync against a recording fake client (no server, no
// network) and returns an *[registry.UpstreamChangedError] when redsync sends
// a script the adapter does not know. watchdog.Attach calls it and refuses to
// start.
package goredsync
