// Package bsmredislock teaches a [registry.Registry] the lock commands of
// github.com/bsm/redislock.
//
//	reg := registry.New(bsmredislock.New())
//
// # What it recognises
//
// redislock runs four Lua scripts through go-redis's Script.Run: EVALSHA
// with the script's SHA1, and EVAL with its source when Redis answers
// NOSCRIPT. [Adapter.Classify] tells the scripts apart by the SHA1 (of the
// source, for EVAL) and reads the key, the stored value (the token followed
// by the metadata) and the TTL from the arguments:
//
//   - obtain: tracked when it returned without error, re-obtains with a
//     custom token included;
//   - refresh: the TTL is updated on 1, the lock untracked on 0;
//   - release: the lock is untracked whatever Redis answered;
//   - the TTL query changes nothing.
//
// # Pinned scripts and the probe
//
// The adapter knows the SHA1s of the scripts of redislock v0.9.4. A later
// redislock with different scripts would lock in ways the registry does not
// see, so [Adapter.Probe] runs the linked redislock against a recording fake
// client (no server, no network) and returns an
// *[registry.UpstreamChangedError] when redislock sends a script the adapter
// does not know. watchdog.Attach calls it and refuses to start.
package bsmredislock
