package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// The upstream libraries, by the names Held.Lib and Obtain use.
const (
	Redislock = "redislock"
	Redsync   = "redsync"
)

// Libs names both upstream libraries, redislock first.
var Libs = []string{Redislock, Redsync}

// ErrUnlockFalse is what [Held.Release] returns when a redsync unlock
// answers false with no error: the mutex was no longer held.
var ErrUnlockFalse = errors.New("redsync: unlock answered false")

// Held is one lock as its holder sees it, obtained through an upstream
// library on a watched client.
type Held struct {
	Lib   string // Redislock or Redsync
	Key   string
	Value string // what the library stored under Key: registry.Lock.Value
	TTL   time.Duration
	// Node names where the key lives (a server's role and address), for
	// messages; empty when the test has one server.
	Node string
	// Client is the watched client the lock was obtained through (the
	// first of a redsync mutex's).
	Client redis.UniversalClient
	Lock   *redislock.Lock // nil for redsync
	Mutex  *redsync.Mutex  // nil for redislock
}

// String describes the lock for messages: library, key, TTL, value (cut
// short) and node.
func (h *Held) String() string {
	s := fmt.Sprintf("%s %s (TTL %v, value %s", h.Lib, h.Key, h.TTL, Short(h.Value))
	if h.Node != "" {
		s += ", on " + h.Node
	}
	return s + ")"
}

// Release releases the lock through its library; a redsync unlock that
// answers false is [ErrUnlockFalse].
func (h *Held) Release(ctx context.Context) error {
	if h.Lock != nil {
		return h.Lock.Release(ctx)
	}
	ok, err := h.Mutex.UnlockContext(ctx)
	if err == nil && !ok {
		err = ErrUnlockFalse
	}
	return err
}

// HeldRedislock is the Held of a redislock lock obtained for ttl.
func HeldRedislock(l *redislock.Lock, ttl time.Duration) *Held {
	return &Held{Lib: Redislock, Key: l.Key(), Value: l.Token() + l.Metadata(), TTL: ttl, Lock: l}
}

// HeldRedsync is the Held of a locked redsync mutex with expiry ttl.
func HeldRedsync(m *redsync.Mutex, ttl time.Duration) *Held {
	return &Held{Lib: Redsync, Key: m.Name(), Value: m.Value(), TTL: ttl, Mutex: m}
}

// NewMutex is a redsync mutex over one pool per client, with expiry ttl,
// one try and opts (which may change either). redsync gives an attempt 5 %
// of the expiry by default (15 ms for 300 ms), too little for a dial on a
// loaded machine or under -race: half of it here, as these tests are about
// what happens once the lock is held.
func NewMutex[C redis.UniversalClient](clients []C, key string, ttl time.Duration, opts ...redsync.Option) *redsync.Mutex {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	opts = append([]redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(1), redsync.WithTimeoutFactor(0.5)}, opts...)
	return redsync.New(pools...).NewMutex(key, opts...)
}

// ObtainRedislock obtains key for ttl with redislock through c, once.
func ObtainRedislock(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (*Held, error) {
	l, err := redislock.New(c).Obtain(ctx, key, ttl, nil)
	if err != nil {
		return nil, err
	}
	h := HeldRedislock(l, ttl)
	h.Client = c
	return h, nil
}

// ObtainRedsync locks key for ttl with a [NewMutex] over clients (a
// majority of them must agree), once.
func ObtainRedsync(ctx context.Context, clients []redis.UniversalClient, key string, ttl time.Duration, opts ...redsync.Option) (*Held, error) {
	m := NewMutex(clients, key, ttl, opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	h := HeldRedsync(m, ttl)
	h.Client = clients[0]
	return h, nil
}

// Obtain obtains key for ttl through the library named lib on c, once.
func Obtain(ctx context.Context, lib string, c redis.UniversalClient, key string, ttl time.Duration) (*Held, error) {
	switch lib {
	case Redislock:
		return ObtainRedislock(ctx, c, key, ttl)
	case Redsync:
		return ObtainRedsync(ctx, []redis.UniversalClient{c}, key, ttl)
	}
	return nil, fmt.Errorf("unknown library %q", lib)
}

// MustObtain is [Obtain] within 15 s that fails t on an error.
func MustObtain(t testing.TB, lib string, c redis.UniversalClient, key string, ttl time.Duration) *Held {
	t.Helper()
	return MustObtainOn(t, lib, []redis.UniversalClient{c}, key, ttl, "")
}

// MustObtainOn obtains key for ttl through the library named lib within
// 15 s, once, or fails t: with redislock through clients[0], with redsync
// over one pool per client (a majority must agree). node names where the
// key lives, for messages (Held.Node). The time is a test's set-up, not a
// bound: CI run 32 (two CPU burners, four test binaries) timed out an
// obtain after 5 s on a server that fsyncs every write (appendfsync
// always).
func MustObtainOn(t testing.TB, lib string, clients []redis.UniversalClient, key string, ttl time.Duration, node string) *Held {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var h *Held
	var err error
	if lib == Redsync {
		h, err = ObtainRedsync(ctx, clients, key, ttl)
	} else {
		h, err = Obtain(ctx, lib, clients[0], key, ttl)
	}
	if err != nil {
		on := ""
		if node != "" {
			on = " on " + node
		}
		t.Fatalf("%s obtain %q for %v%s: got %v, want nil", lib, key, ttl, on, err)
	}
	h.Node = node
	return h
}

// KeysOf returns the keys of hs, in order.
func KeysOf(hs []*Held) []string {
	keys := make([]string, len(hs))
	for i, h := range hs {
		keys[i] = h.Key
	}
	return keys
}

// ReleaseQuietly releases every lock (nil ones are skipped) within a second
// each, at the end of a test: what the test has already looked at is not
// reported again.
func ReleaseQuietly(hs ...*Held) {
	for _, h := range hs {
		if h == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = h.Release(ctx)
		cancel()
	}
}
