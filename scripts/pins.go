package scripts

import "slices"

// The module paths of the lock libraries whose scripts are pinned: a
// [Pin]'s Library, and the argument of [PinsOf] and [Releases].
const (
	// Redislock is the module path of github.com/bsm/redislock.
	Redislock = "github.com/bsm/redislock"
	// Redsync is the module path of github.com/go-redsync/redsync/v4.
	Redsync = "github.com/go-redsync/redsync/v4"
)

// Pin is one upstream script the version guard knows: the library that
// sends it, its name and its SHA1, and the supported releases that send it.
// Script is the name the library gives the script, without a prefix or a
// suffix, as probe errors name it: redislock's "obtain", "refresh",
// "release" and "pttl" (luaObtain in v0.9.4, obtain.lua in v0.10.0, ...),
// redsync's "delete", "touch" and "touchWithSetNX" (deleteScript, ...).
type Pin struct {
	Library  string   // the library's module path: [Redislock] or [Redsync]
	Script   string   // the script's name, e.g. "refresh" or "touch"
	SHA1     string   // the SHA1 of the script's source, lower-case hex, as SCRIPT LOAD reports it
	Releases []string // the supported releases that send the script, oldest first
}

// The releases of github.com/bsm/redislock, and the scripts they send:
//
//	v0.9.4   redislock.go: luaObtain, luaRefresh, luaRelease and luaPTTL, each
//	         on the one key of the lock; refresh and release answer 1 or 0.
//	v0.10.0  obtain.lua, refresh.lua, release.lua and pttl.lua, embedded:
//	         every script replaced. Each runs on every key of the lock
//	         (ObtainMulti locks several); refresh and release answer the
//	         status OK, or nil when a key does not hold the value.
//
// go-redis's Script.Run sends the SHA1 with EVALSHA and, after a NOSCRIPT
// error, the source with EVAL.
var (
	redislockV094 = []string{"v0.9.4"}
	redislockV010 = []string{"v0.10.0"}
)

// The releases of github.com/go-redsync/redsync/v4 that send the pinned
// scripts. Its go-redis v9 pool (redis/goredis/v9) sends the SHA1 with
// EVALSHA and, after a NOSCRIPT error, the source with EVAL. Acquiring is a
// plain SET NX with an expiry, no script.
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
//
// lockwatch's tests run the oldest (the release go.mod requires) and the
// newest (the one CI also tests with); the sources of the releases between
// were hashed when they were pinned.
var redsyncV412to418 = []string{"v4.12.1", "v4.13.0", "v4.15.0", "v4.16.0", "v4.17.0", "v4.18.0", "v4.18.1"}

// pins is the one table of pinned upstream scripts. It is read-only; the
// functions below return copies of it. Its order is kept: by library, and
// within a library oldest release first, a new pin after the others of its
// library (the adapters' fuzz seed corpora name their pins by index).
var pins = []Pin{
	{Redislock, "obtain", "80a1b5f2cfccec3b7119ba7721d2127682b691a7", redislockV094},  // SET NX PX, or re-SET PX when the token prefix matches
	{Redislock, "refresh", "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf", redislockV094}, // PEXPIRE if the value matches
	{Redislock, "release", "cf0e94b2e9ffc7e04395cf88f7583fc309985910", redislockV094}, // DEL if the value matches
	{Redislock, "pttl", "6484da7d58920897fdc22b7f9afd1a3d47524ea8", redislockV094},    // PTTL if the value matches

	{Redislock, "obtain", "eb0c00d98f6f33b4262419a509002884540f30be", redislockV010},  // MSETNX, or MSET when every token prefix matches; then PEXPIRE each key
	{Redislock, "refresh", "5a22d7e8431313862816d4416b5e46dd70fc340d", redislockV010}, // PEXPIRE each key if every value matches (MGET)
	{Redislock, "release", "9470c810040e272ee6c579d8d4331aaf6332a7b1", redislockV010}, // DEL the keys if every value matches (MGET)
	{Redislock, "pttl", "66e1084c2d842a7e8c271925aae90219fac4e129", redislockV010},    // the shortest PTTL if every value matches (MGET)

	{Redsync, "delete", "e950836ed1e694540c503ef9972b8de518044d3b", redsyncV412to418},         // deleteScript: DEL if the value matches; -1 if gone, 0 if another's
	{Redsync, "touch", "d75bb8b5bd13532ddedd17762e772346e39b321e", redsyncV412to418},          // touchScript: PEXPIRE if the value matches (v4.11.0's too)
	{Redsync, "touchWithSetNX", "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79", redsyncV412to418}, // touchWithSetNXScript: PEXPIRE if the value matches, else SET NX PX
}

// Pins returns every pinned upstream script, by library and, within a
// library, oldest release first. The slice and each pin's Releases are new
// copies, the caller's to change. Pins is safe for concurrent use.
func Pins() []Pin { return pinsWhere(func(Pin) bool { return true }) }

// PinsOf returns the pinned scripts of library (a module path, [Redislock]
// or [Redsync]), oldest release first, copies as [Pins] returns them; nil
// for a library whose scripts are not pinned. PinsOf is safe for concurrent
// use.
func PinsOf(library string) []Pin {
	return pinsWhere(func(p Pin) bool { return p.Library == library })
}

// pinsWhere returns copies of the pins for which keep is true, in order.
func pinsWhere(keep func(Pin) bool) []Pin {
	var out []Pin
	for _, p := range pins {
		if keep(p) {
			p.Releases = slices.Clone(p.Releases)
			out = append(out, p)
		}
	}
	return out
}

// Releases returns the supported releases of library (a module path,
// [Redislock] or [Redsync]), oldest first: every release that sends pinned
// scripts. It returns nil for a library whose scripts are not pinned, and a
// new slice each call. Releases is safe for concurrent use.
func Releases(library string) []string {
	var out []string
	for _, p := range pins {
		if p.Library != library {
			continue
		}
		for _, r := range p.Releases {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// SHA1s returns the SHA1 of every script a Redis server may be asked to run
// by lockwatch and the supported releases of the libraries it supports:
// [RenewSHA1] and the SHA1 of every pin, sorted, each once; a new slice each
// call. It is the list for an ACL or a proxy that admits only known scripts.
// SHA1s is safe for concurrent use.
func SHA1s() []string {
	out := []string{RenewSHA1}
	for _, p := range pins {
		out = append(out, p.SHA1)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
