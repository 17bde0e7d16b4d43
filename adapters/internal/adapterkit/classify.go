package adapterkit

import "github.com/lockwatch/lockwatch/registry"

// Both redislock and redsync run their lock scripts with one key and the
// lock's value as the first argument: EVALSHA sha 1 key value ..., or EVAL
// with the source. The helpers below read such commands; the adapters decide
// which of their scripts each helper applies to. None of them allocates for
// EVALSHA with string arguments, and none panics.

// Call reads c as an EVALSHA or EVAL of one of the pinned scripts with one
// key and a value: c.Args holds the command name, the script's SHA1 or
// source, the key count 1, the key, the value and any further arguments. ok
// is false, and s the zero S, when c is no such command or runs a script p
// does not know.
func (p Pins[S]) Call(c registry.Command) (s S, key, value string, ok bool) {
	var unknown S
	args := c.Args
	if len(args) < 5 {
		return unknown, "", "", false
	}
	s = p.Script(c.Name, args[1])
	if s == unknown {
		return unknown, "", "", false
	}
	if n, ok := Integer(args[2]); !ok || n != 1 {
		return unknown, "", "", false
	}
	if key, ok = Text(args[3]); !ok {
		return unknown, "", "", false
	}
	if value, ok = Text(args[4]); !ok {
		return unknown, "", "", false
	}
	return s, key, value, true
}

// Refresh classifies c, read by [Pins.Call], as a script that sets key's TTL
// to its third argument, in milliseconds, when key holds value and answers 1,
// and answers 0 otherwise (PEXPIRE when the value matches): it is
// [registry.OpRefresh] when it answered 1, [registry.OpNotHeld] when it
// answered 0. An expiry of zero or less deletes the key in Redis: when such a
// refresh answered 1 it is [registry.OpRelease]. An error, another reply, an
// expiry that is no integer or does not fit in a time.Duration, and other
// arguments than key, value and expiry are [registry.OpNone].
func Refresh(c registry.Command, key, value string) registry.Action {
	var none registry.Action
	if len(c.Args) != 6 || c.Err != nil {
		return none
	}
	ms, ok := Integer(c.Args[5])
	if !ok {
		return none
	}
	ttl, ok := Millis(ms)
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
}

// Release classifies c, read by [Pins.Call], as a script that deletes key
// when it holds value: it is [registry.OpRelease] whatever it answered, and
// [registry.OpNone] when it has other arguments than key and value.
func Release(c registry.Command, key, value string) registry.Action {
	if len(c.Args) != 5 {
		return registry.Action{}
	}
	return registry.Action{Op: registry.OpRelease, Key: key, Value: value}
}
