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
const RenewSHA1 = "b9eb0e7c6583ae80b466dc5fc935f1795ea25c42"

// Per-key results of [Renew].
const (
	// Renewed: the key held our value and its expiry was set to the TTL.
	Renewed int64 = 1
	// Gone: the key does not exist (deleted or expired).
	Gone int64 = 0
	// Taken: the key holds another value, or is not a string.
	Taken int64 = -1
)

// RenewSource returns the Lua source of the renew script.
func RenewSource() string { return renewSource }

// Renew is the multi-key, owner-checked renew script. Call it with keys
// k1..kn and args v1..vn (the values the locks are held with) followed by
// either ttl1..ttln or a single ttl for every key (TTLs in milliseconds).
// When every lock was renewed it replies n; otherwise one integer per key:
// [Renewed], [Gone] or [Taken]. [RenewResults] decodes either. All keys of
// one call must live on the same node (on a cluster: the same hash slot).
//
// It reads the values with MGET, one command for up to 1000 keys, and
// sends PEXPIRE only for the keys that hold their value: about one command
// per lock on the server.
//
// Renew is safe for concurrent use.
var Renew = redis.NewScript(renewSource)

// RenewResults decodes the reply of a [Renew] call with n keys into one
// result per key ([Renewed], [Gone] or [Taken]).
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
