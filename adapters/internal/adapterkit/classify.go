package adapterkit

import (
	"errors"
	"slices"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// Both redislock and redsync run their lock scripts with the lock's keys and
// then the lock's value as the first argument: EVALSHA sha numkeys key...
// value ..., or EVAL with the source. The helpers below read such commands;
// the adapters decide which of their scripts each helper applies to. None of
// them allocates for EVALSHA with string arguments and one key, and none
// panics.

// Call is an EVALSHA or EVAL of a pinned script, as [Pins.Call] reads it.
// Its slices share the command's arguments, so it is only valid while the
// command is: during Classify. Its methods and the helpers take it by
// pointer, since it is copied on the hook's path otherwise.
type Call[S comparable] struct {
	Script S      // the pinned script it runs
	Key    string // its first key
	Value  string // its first argument after the keys
	Args   []any  // its arguments after Value
	keys   []any  // its key arguments, one or more, each a string or []byte
}

// NumKeys returns how many keys the call has: one or more.
func (c *Call[S]) NumKeys() int { return len(c.keys) }

// Keys returns the call's keys in the order it sent them, in a slice
// allocated for the caller, when it has several, and nil when it has one
// (without allocating): what [registry.Action] Keys holds.
func (c *Call[S]) Keys() []string {
	if len(c.keys) < 2 {
		return nil
	}
	out := make([]string, len(c.keys))
	for i, k := range c.keys {
		out[i], _ = Text(k) // Call checked that every key is text
	}
	return out
}

// Action returns the action op on the call's lock (its keys and value),
// with ttl.
func (c *Call[S]) Action(op registry.Op, ttl time.Duration) registry.Action {
	return registry.Action{Op: op, Key: c.Key, Keys: c.Keys(), Value: c.Value, TTL: ttl}
}

// Call reads the command named name (in lower case) with arguments args as
// an EVALSHA or EVAL of one of the pinned scripts: args holds the command
// name, the script's SHA1 or source, the key count n (at least 1), n keys
// (strings or []byte), the value (a string or []byte) and any further
// arguments. ok is false when it is no such command or runs a script p does
// not know. Call does not allocate for EVALSHA with string
// arguments; which key counts a script takes is for the adapter to check
// ([Call.NumKeys]).
func (p Pins[S]) Call(name string, args []any) (call Call[S], ok bool) {
	if len(args) < 5 {
		return Call[S]{}, false
	}
	var unknown S
	s := p.Script(name, args[1])
	if s == unknown {
		return Call[S]{}, false
	}
	n, ok := Integer(args[2])
	if !ok || n < 1 || n > int64(len(args)-4) { // room for the keys and the value
		return Call[S]{}, false
	}
	keys := args[3 : 3+n]
	for _, k := range keys {
		switch k.(type) {
		case string, []byte:
		default:
			return Call[S]{}, false
		}
	}
	key, _ := Text(keys[0])
	value, ok := Text(args[3+n])
	if !ok {
		return Call[S]{}, false
	}
	return Call[S]{Script: s, Key: key, Value: value, Args: args[4+n:], keys: keys}, true
}

// Replies is how a lock script answers whether the lock's keys held its
// value.
type Replies uint8

const (
	// IntReplies answer the integer 1 when the keys held the value and the
	// script did its work, and 0 when they did not: the reply of PEXPIRE or
	// DEL, or 0 (redislock v0.9.4, redsync).
	IntReplies Replies = iota + 1
	// StatusReplies answer the status OK when the keys held the value and
	// the script did its work, and nil, which go-redis returns as the error
	// redis.Nil, when they did not (redislock v0.10.0).
	StatusReplies
)

// Done returns the reply of a script that answers with r when the keys held
// the value and it did its work: int64(1) or "OK", as go-redis returns them;
// nil for no known r. Probes' fakes answer with it.
func (r Replies) Done() any {
	switch r {
	case IntReplies:
		return int64(1)
	case StatusReplies:
		return "OK"
	}
	return nil
}

// Outcome is what a lock script's reply tells.
type Outcome uint8

const (
	// OutcomeUnknown: the command failed, or the reply is none the script
	// gives.
	OutcomeUnknown Outcome = iota
	// OutcomeDone: the keys held the value and the script did its work.
	OutcomeDone
	// OutcomeNotHeld: the keys did not hold the value; the script changed
	// nothing.
	OutcomeNotHeld
)

// Outcome tells what reply and err, the reply and error of a finished
// command of a script that answers with r, mean. It does not allocate.
func (r Replies) Outcome(reply any, err error) Outcome {
	switch r {
	case IntReplies:
		if err != nil {
			return OutcomeUnknown
		}
		switch n, ok := reply.(int64); {
		case ok && n == 1:
			return OutcomeDone
		case ok && n == 0:
			return OutcomeNotHeld
		}
	case StatusReplies:
		if err == nil {
			if s, ok := reply.(string); ok && s == "OK" {
				return OutcomeDone
			}
			return OutcomeUnknown
		}
		if errors.Is(err, redis.Nil) {
			return OutcomeNotHeld
		}
	}
	return OutcomeUnknown
}

// Refresh classifies call, read from c (an EVALSHA or EVAL), as a script that sets
// the TTL of its keys to its one argument after the value, in milliseconds,
// when they hold the value (PEXPIRE), and answers with r: it is
// [registry.OpRefresh] when it did, [registry.OpNotHeld] when the keys did
// not hold the value. An expiry of zero or less deletes the keys in Redis:
// such a refresh that did is [registry.OpRelease]. An error, another reply,
// an expiry that is no integer or does not fit in a time.Duration, and other
// arguments than the expiry are [registry.OpNone].
//
// A pending c is classified as it will be if it succeeds: [registry.OpRefresh]
// or, to an expiry of zero or less, [registry.OpRelease].
func Refresh[S comparable](c *registry.Command, call *Call[S], r Replies) registry.Action {
	var none registry.Action
	if len(call.Args) != 1 {
		return none
	}
	ms, ok := Integer(call.Args[0])
	if !ok {
		return none
	}
	ttl, ok := Millis(ms)
	if !ok {
		return none
	}
	out := OutcomeDone
	if !c.Pending {
		out = r.Outcome(c.Reply, c.Err)
	}
	switch {
	case out == OutcomeDone && ms > 0:
		return call.Action(registry.OpRefresh, ttl)
	case out == OutcomeDone:
		return call.Action(registry.OpRelease, 0)
	case out == OutcomeNotHeld:
		return call.Action(registry.OpNotHeld, 0)
	}
	return none
}

// Release classifies call, an EVALSHA or EVAL, as a script that deletes its
// keys when they hold the value: it is [registry.OpRelease] whatever the
// command answered, and when it is pending, and [registry.OpNone] when it
// has other arguments than the keys and the value.
func Release[S comparable](call *Call[S]) registry.Action {
	if len(call.Args) != 0 {
		return registry.Action{}
	}
	return call.Action(registry.OpRelease, 0)
}

// SameAction reports whether a and b are the same action: the same Op, Key,
// Value and TTL, and the same Keys, nil and empty told apart.
// [registry.Action] is not comparable with ==.
func SameAction(a, b registry.Action) bool {
	return a.Op == b.Op && a.Key == b.Key && a.Value == b.Value && a.TTL == b.TTL &&
		(a.Keys == nil) == (b.Keys == nil) && slices.Equal(a.Keys, b.Keys)
}
