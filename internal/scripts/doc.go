// Package scripts holds the wire format of lockwatch's renew script: how
// its arguments are laid out and what it answers per lock. The script
// itself, its source and its SHA1, is public, in package
// [github.com/lockwatch/lockwatch/scripts]; its calls are not API.
//
// # Renew
//
// The renew script extends many locks in one call. For each key it runs
// PEXPIRE (on Redis 7 and newer PEXPIREAT to the server's time plus the
// TTL, see renew.lua) only if the key exists and holds the value the lock
// was obtained with, so it never creates a key, never changes a value and never extends a
// lock that another owner holds. Its keys are the locks' keys; its first
// argument is a mode, which says how the rest are laid out:
//
//   - [ModeShared]: one key per lock; v1..vn, the values the locks are held
//     with, then one TTL in milliseconds for every lock;
//   - [ModePerLock]: one key per lock; v1..vn, then ttl1..ttln;
//   - [ModeMulti]: locks over one or more keys, whose keys are consecutive;
//     per lock its number of keys, its value and its TTL. Such a lock is
//     renewed only when every one of its keys holds its value.
//
// [Mode] gives the variant of a mode whose values are SHA1 digests of the
// values. When every lock was renewed the script replies with the number of
// locks; otherwise one integer per lock: [Renewed], [Gone] or [Taken].
// [RenewResults] decodes either. All keys of one call must live on the same
// node (on a cluster: the same hash slot).
//
// It reads the values with MGET, one command for up to 1000 keys, and sets
// an expiry only for the keys that hold their value: about one command per
// key on the server. On Redis 7 and newer that command carries GT, so a
// renewal never shortens a TTL (one that reaches Redis after the holder's refresh to
// a longer TTL changes nothing).
package scripts
