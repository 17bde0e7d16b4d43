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
	// OpAttempt means the library tried to obtain Key with Value and did not
	// get it: another holder had it, or the command failed. It tracks
	// nothing. A lock over several Redis servers (redsync's Redlock: one
	// SET NX per pool, all with the same key and value) counts its attempts
	// and obtains to learn how many servers it spans, and so its majority.
	OpAttempt
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
	case OpAttempt:
		return "attempt"
	}
	return "unknown"
}

// Command is one command as the registry hook hands it to an [Adapter]:
// a finished one, or with Pending one about to be sent. It is only valid
// during the call to [Adapter.Classify]: the adapter must not keep Args, nor
// anything that shares their memory.
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
	// Pending is true when the hook asks before it sends the command: Reply
	// and Err are then unset. The adapter answers with the Action the
	// command will have if it succeeds: OpObtain for an obtain, OpRefresh
	// with the new TTL for a refresh (OpRelease for a refresh that deletes
	// the lock), OpRelease for a release, each with its Key, Keys and Value;
	// OpNone for anything else, and for a command it can only tell from its
	// reply or its caller (redsync's SET NX). It never answers OpNotHeld.
	//
	// The registry uses it to order the watchdog's renewals of a key after
	// the holder's own refreshes and releases of it. Pending is false for a
	// finished command.
	Pending bool
	// Deadline is the deadline of the context a SET was sent with; zero
	// when it has none, and for EVAL and EVALSHA. An adapter may use it to
	// tell a library's SET NX from the application's own cheaply: redsync
	// acquires under a context with a deadline.
	Deadline time.Time
}

// Action is an adapter's verdict on a [Command].
//
// An Action is not comparable with ==, because of Keys.
type Action struct {
	Op Op
	// Key is the lock's key; for a lock over several keys, the first of
	// them.
	Key   string
	Value string
	// Keys holds every key of a lock over several keys (redislock's
	// ObtainMulti, and that lock's refresh and release commands), in
	// the order the command sent them: Keys[0] == Key and len(Keys) >= 2.
	// It is nil for a lock over one key. An adapter returns a slice of its
	// own, freshly allocated for each call ([Command.Args] is only valid
	// during Classify), and allocates none for a lock over one key; the
	// registry may keep it.
	Keys []string
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

// CommandSelector is an optional interface of an [Adapter] that recognises
// only some of the lock-shaped commands. Commands returns their names, as
// [Command.Name] spells them ("set", "eval", "evalsha"); the registry then
// asks the adapter about those commands only, which spares every other
// command a call. An adapter that does not implement it is asked about all
// of them. The registry calls Commands once, in [New].
type CommandSelector interface {
	Adapter
	Commands() []string
}
