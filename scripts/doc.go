// Package scripts names the Lua scripts that lockwatch and the lock
// libraries it supports run on Redis: lockwatch's own renew script, with its
// source and SHA1, and the SHA1s of the upstream scripts the version guard
// pins, per library and release. The adapters recognise lock commands by
// this table; operators read it to allow-list or pre-load scripts.
//
// Everything here is read-only: constants, and functions that return new
// copies. It is safe for concurrent use.
//
// # The renew script
//
// The watchdog renews locks with one script, whose source [RenewSource]
// returns: it sends EVALSHA [RenewSHA1], and EVAL with the source when Redis
// answers NOSCRIPT. For each lock the script sets the expiry only of keys
// that exist and hold the lock's value (PEXPIRE; on Redis 7 and newer
// PEXPIREAT ... GT to the server's TIME, when the script began, plus the
// TTL, so operators who allow-list commands for scripts allow TIME and
// PEXPIREAT too): it never creates a key, never changes a value and never extends
// another owner's lock. Its arguments and replies are lockwatch's wire
// format, not API; the script, and its SHA1 with it, may change in any
// release.
//
// # Pinned upstream scripts
//
// [Pins] lists, by SHA1, the scripts that every supported release of
// github.com/bsm/redislock ([Redislock]) and github.com/go-redsync/redsync/v4
// ([Redsync]) sends; [PinsOf] and [Releases] give one library's. The
// adapters recognise obtain, refresh and release commands by these SHA1s,
// and watchdog.Attach refuses to start (registry.ErrUpstreamChanged) when the
// linked library sends a script that is not pinned.
//
// # Allow-listing and pre-loading
//
// An ACL or a proxy that admits only known scripts admits [SHA1s]: the renew
// script and every pinned script. To admit less, take [RenewSHA1] and the
// pins of the library releases in use ([PinsOf], and each [Pin]'s
// Releases). To pre-load the renew script:
//
//	sha, err := rdb.ScriptLoad(ctx, scripts.RenewSource()).Result() // sha == scripts.RenewSHA1
//
// The libraries load their own scripts: they send EVAL with the source after
// NOSCRIPT.
package scripts
