package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// -value-bytes makes every lock value of the neighbour and storm cases that
// long: redislock's token followed by Options.Metadata padding, or
// redsync's value from redsync.WithGenValueFunc (a random token of the same
// length, then the padding). 0 keeps the libraries' own values (22 bytes
// for redislock, 24 for redsync).
var valueBytes int

const (
	// tokenLen is the length of redislock's token (16 random bytes,
	// unpadded base64), and of the bench's redsync tokens.
	tokenLen = 22
	// idLen is how much of a value identifies its lock: the token and a
	// little more (redsync's own values are 24 bytes).
	idLen = 24
	// minValueBytes and maxValueBytes bound -value-bytes.
	minValueBytes = 32
	maxValueBytes = 64 << 20
)

// pad is the padding of -value-bytes, built once per value of the flag.
var pad struct {
	sync.Mutex
	n int    // guarded by the mutex
	s string // guarded by the mutex
}

// padding is what follows a token to make a value valueBytes long: the
// Options.Metadata of a redislock lock.
func padding() string {
	if valueBytes == 0 {
		return ""
	}
	pad.Lock()
	defer pad.Unlock()
	if pad.n != valueBytes {
		pad.n, pad.s = valueBytes, strings.Repeat("m", valueBytes-tokenLen)
	}
	return pad.s
}

// lockOptions are redislock's options for -value-bytes: nil for its own
// values.
func lockOptions() *redislock.Options {
	if valueBytes == 0 {
		return nil
	}
	return &redislock.Options{Metadata: padding()}
}

// idOf is the part of a value that identifies its lock: a substring of
// value (see heldLock.id for one to keep).
func idOf(value string) string { return value[:min(len(value), idLen)] }

// heldLock is one lock the storm case holds.
type heldLock interface {
	// id is idOf the lock's value in Redis, a string of its own (a
	// substring would keep a long value alive).
	id() string
	// release releases the lock and reports whether it found it lost
	// (then err is nil); err is a failure to be tried again.
	release(ctx context.Context) (lost bool, err error)
}

// locker obtains the storm case's locks with one library.
type locker interface {
	obtain(ctx context.Context, key string) (heldLock, error)
}

// newLocker returns the locker of lib on c, for locks of ttl.
func newLocker(lib string, c *redis.Client, ttl time.Duration) locker {
	if lib == "redsync" {
		return &redsyncLocker{rs: redsync.New(goredis.NewPool(c)), ttl: ttl}
	}
	return &redislockLocker{lc: redislock.New(c), ttl: ttl}
}

type redislockLocker struct {
	lc  *redislock.Client
	ttl time.Duration
}

func (r *redislockLocker) obtain(ctx context.Context, key string) (heldLock, error) {
	l, err := r.lc.Obtain(ctx, key, r.ttl, lockOptions())
	if err != nil {
		return nil, err
	}
	return rlLock{l}, nil
}

type rlLock struct{ l *redislock.Lock }

func (r rlLock) id() string {
	md := r.l.Metadata()
	return idOf(r.l.Token() + md[:min(len(md), idLen)])
}

func (r rlLock) release(ctx context.Context) (bool, error) {
	err := r.l.Release(ctx)
	if errors.Is(err, redislock.ErrLockNotHeld) {
		return true, nil
	}
	return false, err
}

// redsyncLocker obtains mutexes of one try (the storm case tries again
// itself), with a timeout of a fifth of the expiry per try: the README's
// advice for short expiries (redsync's default, 5 %, is 75 ms at 1.5 s).
type redsyncLocker struct {
	rs  *redsync.Redsync
	ttl time.Duration
}

// redsyncTimeoutFactor is the redsync.WithTimeoutFactor of the storm.
const redsyncTimeoutFactor = 0.2

func (r *redsyncLocker) obtain(ctx context.Context, key string) (heldLock, error) {
	opts := []redsync.Option{redsync.WithExpiry(r.ttl), redsync.WithTries(1), redsync.WithTimeoutFactor(redsyncTimeoutFactor)}
	if valueBytes != 0 {
		opts = append(opts, redsync.WithGenValueFunc(longValue))
	}
	m := r.rs.NewMutex(key, opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return rsLock{m}, nil
}

// longValue is a redsync value of valueBytes: a random token, then the
// padding.
func longValue() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b) + padding(), nil
}

type rsLock struct{ m *redsync.Mutex }

func (r rsLock) id() string { return strings.Clone(idOf(r.m.Value())) }

// release counts as lost what redsync reports as expired or taken; an
// unlock that reached no quorum for another reason is an error.
func (r rsLock) release(ctx context.Context) (bool, error) {
	ok, err := r.m.UnlockContext(ctx)
	if ok {
		return false, nil
	}
	var taken *redsync.ErrNodeTaken
	if errors.Is(err, redsync.ErrLockAlreadyExpired) || errors.As(err, &taken) {
		return true, nil
	}
	if err == nil {
		err = errors.New("redsync: unlock reached no quorum")
	}
	return false, err
}
