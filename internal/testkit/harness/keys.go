package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyState is what a server holds under a key, read from outside.
type KeyState struct {
	Exists bool
	Value  string
	PTTL   time.Duration // -1ns without expiry
	Err    error         // the server could not be asked
}

func (s KeyState) String() string {
	switch {
	case s.Err != nil:
		return fmt.Sprintf("unreadable (%v)", s.Err)
	case !s.Exists:
		return "gone"
	}
	return fmt.Sprintf("value %s, PTTL %v", Short(s.Value), s.PTTL)
}

// Holds reports whether the key holds value (and could be read).
func (s KeyState) Holds(value string) bool { return s.Err == nil && s.Exists && s.Value == value }

// ReadMode is how [ReadKeys] sends its commands.
type ReadMode uint8

const (
	// Pipelined sends GET and PTTL of every key in one pipeline.
	Pipelined ReadMode = iota
	// Atomic sends them in one MULTI/EXEC: each key's value and TTL are
	// read at the same instant.
	Atomic
	// Asking precedes each command with ASKING, for the keys of a Redis
	// Cluster slot being imported by c's node.
	Asking
)

// ReadKeys reads GET and PTTL of keys on c, sent as mode says. A key's own
// error (the server could not be asked) is in its KeyState.Err; a key that
// does not exist is a zero KeyState.
func ReadKeys(ctx context.Context, c redis.Cmdable, keys []string, mode ReadMode) map[string]KeyState {
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	queue := func(p redis.Pipeliner) error {
		for i, k := range keys {
			if mode == Asking {
				p.Do(ctx, "asking")
			}
			gets[i] = p.Get(ctx, k)
			if mode == Asking {
				p.Do(ctx, "asking")
			}
			pttls[i] = p.PTTL(ctx, k)
		}
		return nil
	}
	// Each command's own error is looked at below; the pipeline's is the
	// first of them.
	if mode == Atomic {
		_, _ = c.TxPipelined(ctx, queue)
	} else {
		_, _ = c.Pipelined(ctx, queue)
	}
	out := make(map[string]KeyState, len(keys))
	for i, k := range keys {
		v, err := gets[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			out[k] = KeyState{}
		case err != nil:
			out[k] = KeyState{Err: err}
		default:
			out[k] = KeyState{Exists: true, Value: v, PTTL: pttls[i].Val(), Err: pttls[i].Err()}
		}
	}
	return out
}

// FirstErr returns the first error among states of keys, in keys' order.
func FirstErr(states map[string]KeyState, keys []string) error {
	for _, k := range keys {
		if err := states[k].Err; err != nil {
			return err
		}
	}
	return nil
}

// Client returns a client of addr with go-redis's defaults changed by
// opts; it is closed in t.Cleanup.
func Client(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr}
	for _, set := range opts {
		set(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewSpy returns a client of addr that no registry watches, with 1 s socket
// timeouts: what it reads and writes is invisible to lockwatch, as another
// process's would be. It is closed in t.Cleanup.
func NewSpy(t testing.TB, addr string) *redis.Client {
	return Client(t, addr, func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = time.Second, time.Second })
}
