package registry

import (
	"context"
	"time"
)

// Op is what an [Adapter] makes of one finished Redis command.
type Op uint8

const (
	// OpNone means the command is not a lock command of the adapter's library.
	OpNone Op = iota
	// OpObtain means the library now holds Key with Value for TTL.
	OpObtain
	// OpRefresh means the library extended Key (held with Value) to TTL.
	OpRefresh
	// OpNotHeld means the library learnt that it no longer holds Key with
	// Value (a refresh answered 0).
	OpNotHeld
	// OpRelease means the library released Key held with Value, or tried to:
	// the lock is untracked whatever Redis answered.
	OpRelease
)

// String returns the operation's name in lower case.
func (o Op) String() string {
	switch o {
	case OpNone:
		return "none"
	case OpObtain:
		return "obtain"
	case OpRefresh:
		return "refresh"
	case OpNotHeld:
		return "not-held"
	case OpRelease:
		return "release"
	}
	return "unknown"
}

// Command is one finished command as the registry hook hands it to an
// [Adapter]. It is only valid during the call to [Adapter.Classify]: the
// adapter must not keep Args.
type Command struct {
	// Name is the command name in lower case: "set", "eval" or "evalsha".
	// Other commands never reach an adapter, and SET reaches it only when
	// its options include NX.
	Name string
	// Args are the command's arguments as go-redis holds them, the name
	// included at index 0. Their types are whatever the caller passed.
	Args []any
	// Reply is the reply value: the value of a *redis.Cmd, the bool of a
	// *redis.BoolCmd, the string of a *redis.StatusCmd, nil otherwise.
	Reply any
	// Err is the error go-redis returned for the command (redis.Nil included).
	Err error
	// Pending is true when the hook asks before the command is sent; Reply
	// and Err are then unset. The adapter returns the Op the command will
	// have if it succeeds (OpObtain, OpRefresh with its TTL, OpRelease),
	// with its Key, Keys and Value, or OpNone. The registry uses it to
	// order the watchdog's renewals of the key after the holder's command.
	Pending bool
}

// Action is an adapter's verdict on a [Command].
type Action struct {
	Op  Op
	Key string
	// Keys are every key of a lock over several keys (redislock's
	// ObtainMulti), in the order the command sent them, Keys[0] == Key; nil
	// for a lock over one key. The adapter returns a slice of its own: the
	// command's arguments are not valid after Classify.
	Keys  []string
	Value string
	// TTL is the expiry the command set; only for OpObtain and OpRefresh.
	TTL time.Duration
}

// Adapter recognises the lock commands of one upstream locking library.
//
// Implementations must be safe for concurrent use: Classify runs inside the
// go-redis hook on every goroutine that sends a lock-shaped command. Classify
// must not block, call Redis or panic.
type Adapter interface {
	// Name names the adapter, e.g. "redislock". It becomes [Lock.Source].
	Name() string
	// Classify tells whether c is an obtain, refresh or release of the
	// adapter's library, and of which key and value.
	Classify(c Command) Action
	// Probe runs the linked upstream library against a recording fake (no
	// server, no network) and compares the scripts it sends with the ones the
	// adapter knows. It returns nil when every script is pinned, an
	// *[UpstreamChangedError] when some are not, and another error when the
	// probe itself could not run.
	Probe(ctx context.Context) error
}
