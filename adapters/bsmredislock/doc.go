// Package bsmredislock teaches a [registry.Registry] the lock commands of
// github.com/bsm/redislock, releases v0.9.4 and v0.10.0.
//
//	reg := registry.New(bsmredislock.New())
//
// # What it recognises
//
// redislock runs four Lua scripts through go-redis's Script.Run: EVALSHA
// with the script's SHA1, and EVAL with its source when Redis answers
// NOSCRIPT. [Adapter.Classify] tells the scripts apart by the SHA1 (of the
// source, for EVAL) and reads the keys, the stored value (the token followed
// by the metadata) and the TTL from the arguments:
//
//   - obtain: tracked when it returned without error, re-obtains with a
//     custom token included;
//   - refresh: the TTL is updated when it succeeded, the lock untracked when
//     the lock was no longer held;
//   - release: the lock is untracked whatever Redis answered;
//   - the TTL query changes nothing.
//
// v0.10.0 replaced every script of v0.9.4. Its scripts run on every key of
// the lock, since its ObtainMulti locks several keys at once: a lock over
// several keys comes with all of them in [registry.Action] Keys. Its refresh
// and release answer the status OK, or nil (redis.Nil) when the lock is not
// held, where v0.9.4's answer 1 or 0.
//
// Asked before a command is sent ([registry.Command] Pending), Classify
// answers what the command will be if it succeeds.
//
// # Pinned scripts and the probe
//
// The adapter knows the SHA1s of the scripts of redislock v0.9.4 and
// v0.10.0, each pinned with its release in package
// github.com/lockwatch/lockwatch/scripts. A later redislock with different
// scripts would lock in ways the registry does not see, so [Adapter.Probe]
// runs the linked redislock against a recording fake client (no server, no
// network) and returns an *[registry.UpstreamChangedError] when redislock
// sends a script the adapter does not know. watchdog.Attach calls it and
// refuses to start.
//
// The probe expects the scripts of v0.10.0 when the linked redislock's
// Client has ObtainMulti, which it looks up at run time (the adapter builds
// against v0.9.4, the release go.mod requires), and v0.9.4's otherwise; it
// answers them as that release's scripts answer, and then also locks, refreshes,
// queries and releases a lock over several keys with ObtainMulti.
package bsmredislock
