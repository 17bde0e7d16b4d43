package bsmredislock

import (
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/scripts"
)

// Library is the module path of the upstream library the adapter recognises,
// as probe errors name it.
const Library = scripts.Redislock

// Adapter recognises the obtain, refresh and release commands of
// github.com/bsm/redislock. It implements [registry.Adapter].
//
// An Adapter is safe for concurrent use. The zero value is ready to use and
// is the same as the one [New] returns.
type Adapter struct {
	pins adapterkit.Pins[script] // nil means defaultPins; read-only
}

var _ registry.Adapter = (*Adapter)(nil)

var defaultPins = adapterkit.NewPins(pins)

// New returns an adapter that knows the scripts of the supported redislock
// releases, v0.9.4 and v0.10.0. It is safe for concurrent use, and so is the
// adapter.
func New() *Adapter { return newAdapter(pins) }

// newAdapter returns an adapter that knows exactly the given pins. Tests use
// it to pretend that a script is unknown.
func newAdapter(ps []pin) *Adapter { return &Adapter{pins: adapterkit.NewPins(ps)} }

// Name returns "redislock", the [registry.Lock] Source of the locks the
// adapter recognises. It is safe for concurrent use.
func (a *Adapter) Name() string { return "redislock" }

var _ registry.CommandSelector = (*Adapter)(nil)

// Commands returns "eval" and "evalsha": redislock sends every lock command
// as a script, and never a SET NX, so the registry does not ask the adapter
// about SET NX (redsync's acquire, or the application's own). It is safe
// for concurrent use.
func (a *Adapter) Commands() []string { return []string{"eval", "evalsha"} }

// Classify tells whether c is one of redislock's lock commands, as sent by
// v0.9.4 (scripts on one key, refresh and release answering 1 or 0) or by
// v0.10.0 (scripts on every key of the lock, answering the status OK or nil,
// which go-redis returns as the error redis.Nil):
//
//   - the obtain script (EVALSHA or EVAL; arguments the keys, the value, the
//     token length and the TTL in milliseconds) is [registry.OpObtain] when
//     it returned without error. That includes a re-obtain with a custom
//     token, which stores the token followed by the new metadata.
//   - the refresh script (the keys, the value and the TTL in milliseconds)
//     is [registry.OpRefresh] when it answered 1 (v0.9.4) or OK (v0.10.0),
//     and [registry.OpNotHeld] when it answered 0 (v0.9.4) or nil (v0.10.0).
//     A refresh to a TTL of zero or less deletes the keys in Redis: when it
//     succeeded it is [registry.OpRelease].
//   - the release script (the keys and the value) is [registry.OpRelease],
//     whatever it answered.
//
// A lock over several keys (v0.10.0's ObtainMulti) has them all in
// [registry.Action] Keys, in the order sent; the first is Key. v0.9.4's
// scripts on several keys are not redislock's commands.
//
// A pending command ([registry.Command] Pending, asked before it is sent) is
// classified as it will be if it succeeds: an obtain is [registry.OpObtain],
// a refresh [registry.OpRefresh] (or, to a TTL of zero or less,
// [registry.OpRelease]), a release [registry.OpRelease].
//
// Everything else, the TTL script and commands whose arguments redislock
// would not send included, is [registry.OpNone]. Classify does not allocate
// for EVALSHA with string arguments on one key, allocates Keys for several,
// and never panics. It is safe for concurrent use.
func (a *Adapter) Classify(c registry.Command) registry.Action {
	var none registry.Action
	call, ok := a.table().Call(c.Name, c.Args)
	if !ok || (call.NumKeys() != 1 && !call.Script.release.multiKey()) {
		return none
	}
	switch call.Script.kind {
	case kindObtain:
		if ttl, ok := obtained(&c, &call); ok {
			return call.Action(registry.OpObtain, ttl)
		}
	case kindRefresh:
		return adapterkit.Refresh(&c, &call, call.Script.release.replies())
	case kindRelease:
		return adapterkit.Release(&call)
	}
	return none // the TTL script included
}

// obtained tells whether call, an obtain script read from c, obtained (or,
// pending, will obtain) the lock, and for how long: both releases' scripts
// take the value, the token length and the TTL in milliseconds.
func obtained(c *registry.Command, call *adapterkit.Call[script]) (time.Duration, bool) {
	if len(call.Args) != 2 || (c.Err != nil && !c.Pending) {
		return 0, false
	}
	if n, ok := adapterkit.Integer(call.Args[0]); !ok || n < 0 || n > int64(len(call.Value)) {
		return 0, false
	}
	ms, ok := adapterkit.Integer(call.Args[1])
	if !ok || ms <= 0 {
		return 0, false
	}
	return adapterkit.Millis(ms)
}

// table returns the adapter's pins: the zero Adapter's are defaultPins.
func (a *Adapter) table() adapterkit.Pins[script] { return a.pins.Or(defaultPins) }
