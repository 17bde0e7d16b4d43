package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewSource string

// RenewSHA1 is the SHA1 of renew.lua, as SCRIPT LOAD reports it. A test
// checks that it matches the embedded source and a real server.
const RenewSHA1 = "9269fc9f9878dfe4556102da160e34c06cc442f0"

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
// either ttl1..ttln or a single ttl for every key (TTLs in milliseconds);
// it replies with one integer per key: [Renewed], [Gone] or [Taken]. All
// keys of one call must live on the same node (on a cluster: the same hash
// slot).
//
// It reads the values with MGET, one command for up to 1000 keys, and
// sends PEXPIRE only for the keys that hold their value: about one command
// per lock on the server.
//
// Renew is safe for concurrent use.
var Renew = redis.NewScript(renewSource)
