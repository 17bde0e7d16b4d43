package bsmredislock

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
)

// Library is the module path of the upstream library the adapter recognises,
// as probe errors name it.
const Library = "github.com/bsm/redislock"

// Adapter recognises the obtain, refresh and release commands of
// github.com/bsm/redislock. It implements [registry.Adapter].
//
// An Adapter is safe for concurrent use. The zero value is ready to use and
// is the same as the one [New] returns.
type Adapter struct {
	pins map[string]script // by lower-case hex SHA1; nil means defaultPins; read-only
}

var _ registry.Adapter = (*Adapter)(nil)

var defaultPins = pinMap(pins)

// New returns an adapter that knows the scripts of the supported redislock
// releases. It is safe for concurrent use, and so is the adapter.
func New() *Adapter { return newAdapter(pins) }

// newAdapter returns an adapter that knows exactly the given pins. Tests use
// it to pretend that a script is unknown.
func newAdapter(ps []pin) *Adapter { return &Adapter{pins: pinMap(ps)} }

func pinMap(ps []pin) map[string]script {
	m := make(map[string]script, len(ps))
	for _, p := range ps {
		m[p.sha1] = p.script
	}
	return m
}

// Name returns "redislock", the [registry.Lock] Source of the locks the
// adapter recognises. It is safe for concurrent use.
func (a *Adapter) Name() string { return "redislock" }

// Classify tells whether c is one of redislock's lock commands:
//
//   - the obtain script (EVALSHA or EVAL; arguments key, value, token length,
//     TTL in milliseconds) is [registry.OpObtain] when it returned without
//     error. That includes a re-obtain with a custom token, which stores the
//     token followed by the new metadata.
//   - the refresh script (key, value, TTL in milliseconds) is
//     [registry.OpRefresh] when it answered 1 and [registry.OpNotHeld] when
//     it answered 0. A refresh to a TTL of zero or less deletes the key in
//     Redis: when it answered 1 it is [registry.OpRelease].
//   - the release script (key, value) is [registry.OpRelease], whatever it
//     answered.
//
// Everything else, the TTL script and commands whose arguments redislock
// would not send included, is [registry.OpNone]. Classify does not allocate
// for EVALSHA with string arguments and never panics. It is safe for
// concurrent use.
func (a *Adapter) Classify(c registry.Command) registry.Action {
	var none registry.Action
	args := c.Args
	if len(args) < 5 {
		return none
	}
	s := a.scriptOf(c.Name, args[1])
	if s == scriptUnknown || s == scriptPTTL {
		return none
	}
	if n, ok := adapterkit.Integer(args[2]); !ok || n != 1 {
		return none
	}
	key, ok := adapterkit.Text(args[3])
	if !ok {
		return none
	}
	value, ok := adapterkit.Text(args[4])
	if !ok {
		return none
	}
	switch s {
	case scriptObtain:
		if len(args) != 7 || c.Err != nil {
			return none
		}
		if n, ok := adapterkit.Integer(args[5]); !ok || n < 0 || n > int64(len(value)) {
			return none
		}
		ms, ok := adapterkit.Integer(args[6])
		if !ok || ms <= 0 {
			return none
		}
		ttl, ok := adapterkit.Millis(ms)
		if !ok {
			return none
		}
		return registry.Action{Op: registry.OpObtain, Key: key, Value: value, TTL: ttl}
	case scriptRefresh:
		if len(args) != 6 || c.Err != nil {
			return none
		}
		ms, ok := adapterkit.Integer(args[5])
		if !ok {
			return none
		}
		ttl, ok := adapterkit.Millis(ms)
		if !ok {
			return none
		}
		n, ok := c.Reply.(int64)
		switch {
		case !ok:
			return none
		case n == 1 && ms > 0:
			return registry.Action{Op: registry.OpRefresh, Key: key, Value: value, TTL: ttl}
		case n == 1:
			return registry.Action{Op: registry.OpRelease, Key: key, Value: value}
		case n == 0:
			return registry.Action{Op: registry.OpNotHeld, Key: key, Value: value}
		}
		return none
	case scriptRelease:
		if len(args) != 5 {
			return none
		}
		return registry.Action{Op: registry.OpRelease, Key: key, Value: value}
	}
	return none
}

// scriptOf returns which pinned script an EVALSHA or EVAL runs.
func (a *Adapter) scriptOf(name string, arg any) script {
	var buf [2 * sha1.Size]byte
	if !scriptSHA1(name, arg, &buf) {
		return scriptUnknown
	}
	return a.pinMap()[string(buf[:])] // does not allocate
}

// lookup returns the pinned script with the given SHA1.
func (a *Adapter) lookup(sha string) script { return a.pinMap()[sha] }

func (a *Adapter) pinMap() map[string]script {
	if a.pins == nil {
		return defaultPins
	}
	return a.pins
}

// scriptSHA1 writes to buf the lower-case hex SHA1 of the script an EVALSHA
// (its first argument) or an EVAL (the SHA1 of its source) runs. It reports
// false when arg cannot name a script.
func scriptSHA1(name string, arg any, buf *[2 * sha1.Size]byte) bool {
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
		src, ok := adapterkit.Text(arg)
		if !ok {
			return false
		}
		sum := sha1.Sum([]byte(src))
		hex.Encode(buf[:], sum[:])
		return true
	}
	return false
}
