package adapterkit

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"

	"github.com/lockwatch/lockwatch/scripts"
)

// Pin ties one script SHA1 to what the script does. S is the adapter's own
// script type, whose zero value means an unknown script.
type Pin[S comparable] struct {
	SHA1   string // lower-case hex
	Script S
	// Releases names the upstream releases that send the script, e.g.
	// "v0.9.4" or "v4.12.1 to v4.18.1".
	Releases string
}

// PinsOf returns the pins of library (a module path) in the one table of
// pinned scripts, package [scripts], in its order, each with the adapter's
// own script as script maps it. A pin's Releases names the release that
// sends it, or the oldest and the newest ("v4.12.1 to v4.18.1"). PinsOf
// panics when script does not know one of the library's pins: the table and
// the adapters are one module, so every adapter test would fail first.
func PinsOf[S comparable](library string, script func(scripts.Pin) (S, bool)) []Pin[S] {
	var out []Pin[S]
	for _, p := range scripts.PinsOf(library) {
		if len(p.Releases) == 0 {
			panic(fmt.Sprintf("adapterkit: the pinned script %s %s of %s names no release", p.Script, p.SHA1, library))
		}
		s, ok := script(p)
		if !ok {
			panic(fmt.Sprintf("adapterkit: the adapter of %s does not know its pinned script %s %s of %v", library, p.Script, p.SHA1, p.Releases))
		}
		releases := p.Releases[0]
		if n := len(p.Releases); n > 1 {
			releases += " to " + p.Releases[n-1]
		}
		out = append(out, Pin[S]{SHA1: p.SHA1, Script: s, Releases: releases})
	}
	return out
}

// Pins is a read-only table of pinned scripts by lower-case hex SHA1. It is
// safe for concurrent use.
type Pins[S comparable] map[string]S

// NewPins returns the table of ps. The table of no pins is empty, not nil.
func NewPins[S comparable](ps []Pin[S]) Pins[S] {
	m := make(Pins[S], len(ps))
	for _, p := range ps {
		m[p.SHA1] = p.Script
	}
	return m
}

// Or returns p, or def when p is nil: the zero value of an adapter, whose
// table is nil, uses its default pins.
func (p Pins[S]) Or(def Pins[S]) Pins[S] {
	if p == nil {
		return def
	}
	return p
}

// Lookup returns the pinned script with the given lower-case hex SHA1, or
// the zero S.
func (p Pins[S]) Lookup(sha string) S { return p[sha] }

// Script returns which pinned script an EVALSHA or EVAL runs, or the zero S:
// name is the command's lower-case name and arg its first argument (the
// SHA1, or the source). It does not allocate for EVALSHA with a string SHA1.
func (p Pins[S]) Script(name string, arg any) S {
	if sha, ok := arg.(string); ok && name == "evalsha" {
		// go-redis sends the lower-case SHA1 a Script holds: looked up as
		// it is, without the copy below.
		if s, found := p[sha]; found || !hasUpper(sha) {
			return s
		}
	}
	var buf [2 * sha1.Size]byte
	if !ScriptSHA1(name, arg, &buf) {
		var unknown S
		return unknown
	}
	return p[string(buf[:])] // does not allocate
}

// hasUpper reports whether s holds an upper-case ASCII letter.
func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// ScriptSHA1 writes to buf the lower-case hex SHA1 of the script an EVALSHA
// (its first argument) or an EVAL (the SHA1 of its source) runs. It reports
// false when arg cannot name a script.
func ScriptSHA1(name string, arg any, buf *[2 * sha1.Size]byte) bool {
	switch name {
	case "evalsha":
		sha, ok := arg.(string)
		if !ok {
			b, isBytes := arg.([]byte)
			if !isBytes {
				return false
			}
			sha = string(b)
		}
		if len(sha) != len(buf) {
			return false
		}
		for i := 0; i < len(buf); i++ { // Redis looks SHA1s up in lower case
			c := sha[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		return true
	case "eval":
		src, ok := Text(arg)
		if !ok {
			return false
		}
		sum := sha1.Sum([]byte(src))
		hex.Encode(buf[:], sum[:])
		return true
	}
	return false
}
