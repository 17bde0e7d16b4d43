package scripts

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewSource string

// RenewSHA1 is the SHA1 of renew.lua, as SCRIPT LOAD reports it. A test
// checks that it matches the embedded source and a real server.
const RenewSHA1 = "9cfc26a5a296f4c052cfb300f6abba98b646da96"

// Layouts of [Renew]'s arguments, its first ARGV.
const (
	// ModeShared: one key per lock; the values, then one TTL for every lock.
	ModeShared = "s"
	// ModePerLock: one key per lock; the values, then one TTL per lock.
	ModePerLock = "p"
	// ModeMulti: locks over one or more keys (consecutive in KEYS); per lock
	// its number of keys, its value and its TTL.
	ModeMulti = "m"
)

// Mode returns the layout mode (ModeShared, ModePerLock or ModeMulti) for
// a call whose values are digests (digest true: the SHA1 in hex of each
// lock's value, as redis.sha1hex computes it) or the values themselves.
func Mode(mode string, digest bool) string {
	if !digest {
		return mode
	}
	switch mode {
	case ModeShared:
		return "S"
	case ModePerLock:
		return "P"
	case ModeMulti:
		return "M"
	}
	return mode
}

// Per-lock results of [Renew].
const (
	// Renewed: the key held our value and its expiry was set to the TTL.
	Renewed int64 = 1
	// Gone: a key of the lock does not exist (deleted or expired).
	Gone int64 = 0
	// Taken: a key of the lock holds another value, or is not a string.
	Taken int64 = -1
)

// RenewSource returns the Lua source of the renew script.
func RenewSource() string { return renewSource }

// Renew is the multi-key, owner-checked renew script. Its keys are the
// locks' keys; its first argument is a mode, which says how the rest are
// laid out:
//
//   - [ModeShared]: one key per lock; v1..vn, the values the locks are held
//     with, then one TTL in milliseconds for every lock;
//   - [ModePerLock]: one key per lock; v1..vn, then ttl1..ttln;
//   - [ModeMulti]: locks over one or more keys, whose keys are consecutive;
//     per lock its number of keys, its value and its TTL. Such a lock is
//     renewed only when every one of its keys holds its value.
//
// When every lock was renewed it replies with the number of locks;
// otherwise one integer per lock: [Renewed], [Gone] or [Taken].
// [RenewResults] decodes either. All keys of one call must live on the same
// node (on a cluster: the same hash slot).
//
// It reads the values with MGET, one command for up to 1000 keys, and
// sends PEXPIRE only for the keys that hold their value: about one command
// per key on the server. On Redis 7 and newer the PEXPIRE carries GT, so a
// renewal never shortens a TTL (one that reaches Redis after the holder's
// refresh to a longer TTL changes nothing).
//
// Renew is safe for concurrent use.
var Renew = redis.NewScript(renewSource)

// RenewResults decodes the reply of a [Renew] call for n locks into one
// result per lock ([Renewed], [Gone] or [Taken]).
func RenewResults(reply any, n int) ([]int64, error) {
	switch r := reply.(type) {
	case int64:
		if r != int64(n) {
			return nil, fmt.Errorf("scripts: renew answered %d for %d keys", r, n)
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = Renewed
		}
		return out, nil
	case []any:
		if len(r) != n {
			return nil, fmt.Errorf("scripts: renew answered %d results for %d keys", len(r), n)
		}
		out := make([]int64, n)
		for i, v := range r {
			x, ok := v.(int64)
			if !ok || x < Taken || x > Renewed {
				return nil, fmt.Errorf("scripts: renew answered %v (%T) for key %d, want 1, 0 or -1", v, v, i+1)
			}
			out[i] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("scripts: renew answered %v (%T), want an integer or an array", reply, reply)
}
