package bsmredislock

import "github.com/lockwatch/lockwatch/adapters/internal/adapterkit"

// The SHA1s of the Lua scripts github.com/bsm/redislock sends, computed from
// the script sources. go-redis's Script.Run sends the SHA1 with EVALSHA and,
// after a NOSCRIPT error, the source with EVAL.
//
// Which releases send which scripts:
//
//	v0.9.4   redislock.go: luaObtain, luaRefresh, luaRelease and luaPTTL, each
//	         on the one key of the lock; refresh and release answer 1 or 0.
//	v0.10.0  obtain.lua, refresh.lua, release.lua and pttl.lua, embedded:
//	         every script replaced. Each runs on every key of the lock
//	         (ObtainMulti locks several); refresh and release answer the
//	         status OK, or nil when a key does not hold the value.
const (
	v094ObtainSHA1  = "80a1b5f2cfccec3b7119ba7721d2127682b691a7" // SET NX PX, or re-SET PX when the token prefix matches
	v094RefreshSHA1 = "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf" // PEXPIRE if the value matches
	v094ReleaseSHA1 = "cf0e94b2e9ffc7e04395cf88f7583fc309985910" // DEL if the value matches
	v094PTTLSHA1    = "6484da7d58920897fdc22b7f9afd1a3d47524ea8" // PTTL if the value matches

	v010ObtainSHA1  = "eb0c00d98f6f33b4262419a509002884540f30be" // MSETNX, or MSET when every token prefix matches; then PEXPIRE each key
	v010RefreshSHA1 = "5a22d7e8431313862816d4416b5e46dd70fc340d" // PEXPIRE each key if every value matches (MGET)
	v010ReleaseSHA1 = "9470c810040e272ee6c579d8d4331aaf6332a7b1" // DEL the keys if every value matches (MGET)
	v010PTTLSHA1    = "66e1084c2d842a7e8c271925aae90219fac4e129" // the shortest PTTL if every value matches (MGET)
)

// kind is what one of redislock's scripts does.
type kind uint8

const (
	kindUnknown kind = iota
	kindObtain
	kindRefresh
	kindRelease
	kindPTTL
)

// String returns the name the probe reports the script under.
func (k kind) String() string {
	switch k {
	case kindObtain:
		return "obtain"
	case kindRefresh:
		return "refresh"
	case kindRelease:
		return "release"
	case kindPTTL:
		return "pttl"
	}
	return "unknown"
}

// release is a redislock release whose scripts the adapter knows: its
// scripts take different key counts and answer differently.
type release uint8

const (
	releaseUnknown release = iota
	v094                   // one key; 1 or 0
	v010                   // one key or several; OK or nil
)

// String returns the release's version.
func (r release) String() string {
	switch r {
	case v094:
		return "v0.9.4"
	case v010:
		return "v0.10.0"
	}
	return "unknown"
}

// multiKey reports whether the release's scripts run on several keys.
func (r release) multiKey() bool { return r == v010 }

// replies returns how the release's refresh and release scripts answer.
func (r release) replies() adapterkit.Replies {
	if r == v010 {
		return adapterkit.StatusReplies
	}
	return adapterkit.IntReplies
}

// script is one of redislock's scripts: what it does, and the release that
// sends it. The zero script is unknown.
type script struct {
	kind    kind
	release release
}

// String returns the name the probe reports the script under.
func (s script) String() string { return s.kind.String() }

// pin ties one script SHA1 to what the script does and the releases that
// send it.
type pin = adapterkit.Pin[script]

// pins are the scripts of every supported redislock release, oldest first.
// New pins go at the end: the fuzz seed corpus names pins by index.
var pins = []pin{
	{SHA1: v094ObtainSHA1, Script: script{kindObtain, v094}, Releases: "v0.9.4"},
	{SHA1: v094RefreshSHA1, Script: script{kindRefresh, v094}, Releases: "v0.9.4"},
	{SHA1: v094ReleaseSHA1, Script: script{kindRelease, v094}, Releases: "v0.9.4"},
	{SHA1: v094PTTLSHA1, Script: script{kindPTTL, v094}, Releases: "v0.9.4"},
	{SHA1: v010ObtainSHA1, Script: script{kindObtain, v010}, Releases: "v0.10.0"},
	{SHA1: v010RefreshSHA1, Script: script{kindRefresh, v010}, Releases: "v0.10.0"},
	{SHA1: v010ReleaseSHA1, Script: script{kindRelease, v010}, Releases: "v0.10.0"},
	{SHA1: v010PTTLSHA1, Script: script{kindPTTL, v010}, Releases: "v0.10.0"},
}

// pinsOf returns the pins of release r, in pins order.
func pinsOf(r release) []pin {
	var out []pin
	for _, p := range pins {
		if p.Script.release == r {
			out = append(out, p)
		}
	}
	return out
}

// Releases returns the redislock releases whose scripts the adapter knows,
// oldest first. Each is exercised by lockwatch's tests: the oldest is the
// one lockwatch's go.mod requires, the newest the one CI also tests with.
// Releases is safe for concurrent use.
func Releases() []string { return []string{v094.String(), v010.String()} }
