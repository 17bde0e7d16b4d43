package bsmredislock

import (
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/scripts"
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

// pins are the scripts of every supported redislock release, oldest first:
// package scripts pins their SHA1s and says which release sends which
// script (scripts.PinsOf(scripts.Redislock)). They come in the table's
// order, which it keeps: the fuzz seed corpus names pins by index.
var pins = adapterkit.PinsOf(scripts.Redislock, func(p scripts.Pin) (script, bool) {
	s := script{kindOf(p.Script), releaseOf(p.Releases[0])}
	return s, s.kind != kindUnknown && s.release != releaseUnknown
})

// kindOf returns the kind of the script redislock calls name.
func kindOf(name string) kind {
	for _, k := range []kind{kindObtain, kindRefresh, kindRelease, kindPTTL} {
		if k.String() == name {
			return k
		}
	}
	return kindUnknown
}

// releaseOf returns the release whose version is v.
func releaseOf(v string) release {
	for _, r := range []release{v094, v010} {
		if r.String() == v {
			return r
		}
	}
	return releaseUnknown
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
// oldest first, as scripts.Releases(scripts.Redislock) does. Each is
// exercised by lockwatch's tests: the oldest is the one lockwatch's go.mod
// requires, the newest the one CI also tests with. Releases is safe for
// concurrent use.
func Releases() []string { return scripts.Releases(scripts.Redislock) }
