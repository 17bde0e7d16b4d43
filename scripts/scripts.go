package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewSource string

// RenewSHA1 is the SHA1 of renew.lua, as SCRIPT LOAD reports it. A test
// checks that it matches the embedded source and a real server.
const RenewSHA1 = "1cd55aaf2334d4c479e5f0ec70e165394a51eea0"

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
// k1..kn and args v1, ttl1, ..., vn, ttln (TTL in milliseconds); it replies
// with one integer per key: [Renewed], [Gone] or [Taken]. All keys of one
// call must live on the same node (on a cluster: the same hash slot).
//
// Renew is safe for concurrent use.
var Renew = redis.NewScript(renewSource)
