// Package scripts holds lockwatch's own Lua, embedded, each script next to
// its pinned SHA1.
//
// # Renew
//
// [Renew] extends many locks in one call. For each key it runs PEXPIRE only
// if the key exists and holds the value the lock was obtained with, so it
// never creates a key, never changes a value and never extends a lock that
// another owner holds. Its reply tells, per key, whether the lock was
// renewed, is gone, or is held by someone else.
package scripts
