package goredsync

import "github.com/lockwatch/lockwatch/adapters/internal/adapterkit"

// The SHA1s of the Lua scripts github.com/go-redsync/redsync/v4 sends,
// computed from the script sources. Its go-redis v9 pool
// (redis/goredis/v9) sends the SHA1 with EVALSHA and, after a NOSCRIPT
// error, the source with EVAL. Acquiring is a plain SET NX with an expiry,
// no script.
//
// Which releases send which scripts:
//
//	v4.11.0          delete differs (00583931c4e4d483f6233879c133c71ed5393f9d) and
//	                 there is no touchWithSetNX; below the version go.mod requires,
//	                 so not pinned.
//	v4.12.1          mutex.go: deleteScript, touchScript, touchWithSetNXScript (first release with it).
//	v4.13.0          mutex.go: the same three sources.
//	v4.14.0          retracted by upstream.
//	v4.15.0          scripts.go, the SHA1 now written out as NewScript's third
//	                 argument: the same three sources and SHA1s.
//	v4.16.0          scripts.go: the same.
//	v4.17.0          scripts.go: the same.
//	v4.18.0          scripts.go: the same.
//	v4.18.1          scripts.go: the same.
const (
	deleteSHA1         = "e950836ed1e694540c503ef9972b8de518044d3b" // deleteScript: DEL if the value matches; -1 if gone, 0 if another's
	touchSHA1          = "d75bb8b5bd13532ddedd17762e772346e39b321e" // touchScript: PEXPIRE if the value matches
	touchWithSetNXSHA1 = "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79" // touchWithSetNXScript: PEXPIRE if the value matches, else SET NX PX
)

// script is what one of redsync's scripts does.
type script uint8

const (
	scriptUnknown script = iota
	scriptDelete
	scriptTouch
	scriptTouchWithSetNX
)

// String returns redsync's name for the script.
func (s script) String() string {
	switch s {
	case scriptDelete:
		return "delete"
	case scriptTouch:
		return "touch"
	case scriptTouchWithSetNX:
		return "touchWithSetNX"
	}
	return "unknown"
}

// pin ties one script SHA1 to what the script does and the releases that
// send it.
type pin = adapterkit.Pin[script]

// pins are the scripts of every supported redsync release.
var pins = []pin{
	{SHA1: deleteSHA1, Script: scriptDelete, Releases: "v4.12.1 to v4.18.1"},
	{SHA1: touchSHA1, Script: scriptTouch, Releases: "v4.12.1 to v4.18.1"}, // and v4.11.0
	{SHA1: touchWithSetNXSHA1, Script: scriptTouchWithSetNX, Releases: "v4.12.1 to v4.18.1"},
}

// Releases returns the first and the last redsync release the adapter
// knows; every release between them sends the same scripts (see the pins).
// Both are exercised by lockwatch's tests: the first is the one lockwatch's
// go.mod requires, the last the one CI also tests with. Releases is safe
// for concurrent use.
func Releases() []string { return []string{"v4.12.1", "v4.18.1"} }
