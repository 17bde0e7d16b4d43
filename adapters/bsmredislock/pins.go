package bsmredislock

import "github.com/lockwatch/lockwatch/adapters/internal/adapterkit"

// The SHA1s of the Lua scripts github.com/bsm/redislock sends, computed from
// the script sources in its redislock.go. go-redis's Script.Run sends the
// SHA1 with EVALSHA and, after a NOSCRIPT error, the source with EVAL.
//
// v0.9.4: luaObtain, luaRefresh, luaRelease and luaPTTL as below.
const (
	obtainSHA1  = "80a1b5f2cfccec3b7119ba7721d2127682b691a7" // luaObtain: SET NX PX, or re-set when the token prefix matches
	refreshSHA1 = "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf" // luaRefresh: PEXPIRE if the value matches
	releaseSHA1 = "cf0e94b2e9ffc7e04395cf88f7583fc309985910" // luaRelease: DEL if the value matches
	pttlSHA1    = "6484da7d58920897fdc22b7f9afd1a3d47524ea8" // luaPTTL: PTTL if the value matches
)

// script is what one of redislock's scripts does.
type script uint8

const (
	scriptUnknown script = iota
	scriptObtain
	scriptRefresh
	scriptRelease
	scriptPTTL
)

// String returns the name the probe reports the script under.
func (s script) String() string {
	switch s {
	case scriptObtain:
		return "obtain"
	case scriptRefresh:
		return "refresh"
	case scriptRelease:
		return "release"
	case scriptPTTL:
		return "pttl"
	}
	return "unknown"
}

// pin ties one script SHA1 to what the script does.
type pin = adapterkit.Pin[script]

// pins are the scripts of every supported redislock release.
var pins = []pin{
	{SHA1: obtainSHA1, Script: scriptObtain},
	{SHA1: refreshSHA1, Script: scriptRefresh},
	{SHA1: releaseSHA1, Script: scriptRelease},
	{SHA1: pttlSHA1, Script: scriptPTTL},
}
