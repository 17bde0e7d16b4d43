package goredsync

import (
	"math"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/scripts"
)

// Library is the module path of the upstream library the adapter recognises,
// as probe errors name it.
const Library = scripts.Redsync

// Adapter recognises the lock, extend and unlock commands redsync sends
// through its go-redis v9 pool (github.com/go-redsync/redsync/v4/redis/goredis/v9).
// It implements [registry.Adapter].
//
// An Adapter is safe for concurrent use. The zero value is ready to use and
// is the same as the one [New] returns.
type Adapter struct {
	pins adapterkit.Pins[script] // nil means defaultPins; read-only
}

var _ registry.Adapter = (*Adapter)(nil)

var defaultPins = adapterkit.NewPins(pins)

// New returns an adapter that knows the scripts of the supported redsync
// releases. It is safe for concurrent use, and so is the adapter.
func New() *Adapter { return newAdapter(pins) }

// newAdapter returns an adapter that knows exactly the given pins. Tests use
// it to pretend that a script is unknown.
func newAdapter(ps []pin) *Adapter { return &Adapter{pins: adapterkit.NewPins(ps)} }

// Name returns "redsync", the [registry.Lock] Source of the locks the
// adapter recognises. It is safe for concurrent use.
func (a *Adapter) Name() string { return "redsync" }

// Classify tells whether c is one of redsync's lock commands:
//
//   - SET key value NX with PX or EX (options in any order and case) that
//     succeeded is [registry.OpObtain] when redsync sent it: Classify looks
//     for redsync's functions on the calling goroutine's stack, which is the
//     goroutine that sent the command. One that did not get the key (another
//     holder had it) or failed is [registry.OpAttempt]: redsync sends one
//     per pool, and the registry counts them to learn the majority of a
//     mutex over several servers. The same SET sent by the application is
//     [registry.OpNone].
//   - the touch and touchWithSetNX scripts (EVALSHA or EVAL; arguments key,
//     value, expiry in milliseconds), which Mutex.Extend sends, are
//     [registry.OpRefresh] when they answered 1 and [registry.OpNotHeld]
//     when they answered 0. An expiry of zero or less deletes the key in
//     Redis: when such a touch answered 1 it is [registry.OpRelease].
//   - the delete script (key, value), which Mutex.Unlock sends and Lock
//     sends after failing to reach a quorum, is [registry.OpRelease],
//     whatever it answered. The registry drops a lock only when the value
//     matches, so the release of a value that was never obtained changes
//     nothing.
//
// Everything else, scripts with more than one key included, is
// [registry.OpNone].
//
// A pending command ([registry.Command] Pending, asked before it is sent) is
// classified as it will be if it succeeds: a touch or touchWithSetNX is
// [registry.OpRefresh] (or, to an expiry of zero or less,
// [registry.OpRelease]), a delete [registry.OpRelease]. A pending SET is
// [registry.OpNone] without a stack walk: the registry learns redsync's
// obtains from their replies.
//
// Telling redsync's SET NX from the application's own takes the caller's
// stack, but rarely a walk of it: a SET NX sent under a context without a
// deadline cannot be redsync's (redsync acquires under one), and the
// verdict for a call site is remembered after its first walk.
//
// Classify never panics and does not allocate for EVALSHA with string
// arguments, nor for a SET NX whose call site was seen before. It is safe
// for concurrent use.
func (a *Adapter) Classify(c registry.Command) registry.Action {
	switch c.Name {
	case "set":
		if c.Pending {
			return registry.Action{}
		}
		return classifySet(&c)
	case "eval", "evalsha":
		return a.classifyScript(&c)
	}
	return registry.Action{}
}

func classifySet(c *registry.Command) registry.Action {
	var none registry.Action
	key, value, ttl, ok := parseSet(c.Args)
	if !ok {
		return none
	}
	got := c.Err == nil
	if b, isBool := c.Reply.(bool); isBool {
		got = got && b
	} else if s, _ := c.Reply.(string); s != "OK" {
		got = false
	}
	// redsync acquires under a context with a deadline (see stack.go): a
	// SET NX without one is the application's, and needs no stack walk.
	if c.Deadline.IsZero() || !calledFromRedsync() {
		return none
	}
	if !got {
		// Not obtained on this server: one of an acquire's attempts, which
		// tell the registry how many servers a Redlock mutex spans.
		return registry.Action{Op: registry.OpAttempt, Key: key, Value: value}
	}
	return registry.Action{Op: registry.OpObtain, Key: key, Value: value, TTL: ttl}
}

// parseSet reads SET key value with NX and exactly one of PX and EX, and no
// other option, as Redis would accept it.
func parseSet(args []any) (key, value string, ttl time.Duration, ok bool) {
	if len(args) != 6 { // SET key value, NX, PX|EX n
		return "", "", 0, false
	}
	// As go-redis's SetNX writes it, which redsync sends: strings, then
	// px or ex, an int64, nx.
	key, isKey := args[1].(string)
	value, isValue := args[2].(string)
	unit, isUnit := args[3].(string)
	n, isN := args[4].(int64)
	nx, isNX := args[5].(string)
	if isKey && isValue && isUnit && isN && isNX && nx == "nx" {
		switch unit {
		case "px":
			ttl, ok = expiry(n, time.Millisecond)
			return key, value, ttl, ok
		case "ex":
			ttl, ok = expiry(n, time.Second)
			return key, value, ttl, ok
		}
	}
	return parseSetArgs(args)
}

// parseSetArgs is parseSet for any spelling: options in any order and case,
// key and value as strings or bytes, the expiry as any integer or as text.
func parseSetArgs(args []any) (key, value string, ttl time.Duration, ok bool) {
	if key, ok = adapterkit.Text(args[1]); !ok {
		return "", "", 0, false
	}
	if value, ok = adapterkit.Text(args[2]); !ok {
		return "", "", 0, false
	}
	var (
		nx   bool
		unit time.Duration
		n    int64
	)
	for i := 3; i < len(args); i++ {
		opt, isString := args[i].(string)
		if !isString {
			return "", "", 0, false
		}
		switch {
		case isOption(opt, "nx") && !nx:
			nx = true
		case (isOption(opt, "px") || isOption(opt, "ex")) && unit == 0 && i+1 < len(args):
			unit = time.Millisecond
			if opt[0] == 'e' || opt[0] == 'E' {
				unit = time.Second
			}
			i++
			if n, ok = adapterkit.Integer(args[i]); !ok {
				return "", "", 0, false
			}
		default:
			return "", "", 0, false
		}
	}
	if !nx || unit == 0 {
		return "", "", 0, false
	}
	if ttl, ok = expiry(n, unit); !ok {
		return "", "", 0, false
	}
	return key, value, ttl, true
}

// expiry returns n units, when n is positive and n units fit a Duration
// (the units are constants at the calls: no division at run time).
func expiry(n int64, unit time.Duration) (time.Duration, bool) {
	if n <= 0 || n > math.MaxInt64/int64(unit) {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// isOption reports whether opt is the option name, two lower-case letters,
// in any ASCII case, as Redis compares options.
func isOption(opt, name string) bool {
	return len(opt) == 2 && opt[0]|0x20 == name[0] && opt[1]|0x20 == name[1]
}

// classifyScript classifies an EVALSHA or EVAL: redsync runs each script on
// one key, and its scripts answer 1 or 0.
func (a *Adapter) classifyScript(c *registry.Command) registry.Action {
	call, ok := a.table().Call(c.Name, c.Args)
	if !ok || call.NumKeys() != 1 {
		return registry.Action{}
	}
	switch call.Script {
	case scriptDelete:
		return adapterkit.Release(&call)
	case scriptTouch, scriptTouchWithSetNX:
		return adapterkit.Refresh(c, &call, adapterkit.IntReplies)
	}
	return registry.Action{}
}

// table returns the adapter's pins: the zero Adapter's are defaultPins.
func (a *Adapter) table() adapterkit.Pins[script] { return a.pins.Or(defaultPins) }
