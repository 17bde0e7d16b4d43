package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// contender is a second party, with its own client, its own redislock
// client and its own redsync mutex, that wants the job's locks.
type contender struct {
	locker   *redislock.Client
	mutex    *redsync.Mutex
	locks    []held // report, invoice
	ttl      time.Duration
	attempts atomic.Int64
	wins     atomic.Int64
}

func newContender(rdb *redis.Client, locks []held, reportTTL time.Duration, mutexOpts []redsync.Option) *contender {
	opts := append([]redsync.Option{redsync.WithTries(contenderTries)}, mutexOpts...)
	return &contender{
		locker: redislock.New(rdb),
		mutex:  redsync.New(goredis.NewPool(rdb)).NewMutex(locks[1].key, opts...),
		locks:  locks,
		ttl:    reportTTL,
	}
}

// contend tries to take both locks every pause until ctx ends. Any success
// breaks a check; the lock taken is given back at once.
func (c *contender) contend(ctx context.Context, pause time.Duration, checks *checker) {
	t := time.NewTicker(pause)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range c.locks {
			if ctx.Err() != nil {
				return
			}
			c.attempts.Add(1)
			release, err := c.try(ctx, i)
			if err == nil {
				c.wins.Add(1)
				checks.add("contender "+c.locks[i].key, checkContender(c.locks[i].key, true, true))
				release()
			}
		}
	}
}

// takeAll takes both locks once the job has released them, checks that it
// could, gives them back, and returns how many it took.
func (c *contender) takeAll(ctx context.Context, checks *checker) int {
	n := 0
	for i := range c.locks {
		release, err := c.try(ctx, i)
		checks.add("after "+c.locks[i].key, checkContender(c.locks[i].key, false, err == nil))
		if err == nil {
			n++
			release()
		}
	}
	return n
}

// try makes one attempt on lock i (0: the redislock lock, 1: the redsync
// mutex). On success it returns a function that releases the lock.
func (c *contender) try(ctx context.Context, i int) (release func(), err error) {
	if i == 0 {
		var l *redislock.Lock
		err = call(ctx, func(ctx context.Context) (err error) {
			l, err = c.locker.Obtain(ctx, c.locks[0].key, c.ttl, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		return func() { _ = call(ctx, l.Release) }, nil
	}
	if err := call(ctx, c.mutex.LockContext); err != nil {
		return nil, err
	}
	return func() {
		_ = call(ctx, func(ctx context.Context) error { _, err := c.mutex.UnlockContext(ctx); return err })
	}, nil
}

// call runs fn with a deadline of opTimeout. It is not cut short when ctx
// is cancelled, so that an interrupted demo still releases its locks.
func call(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	return fn(ctx)
}

func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("lockwatch-demo:%d-%s:", os.Getpid(), hex.EncodeToString(b[:]))
}

func closeClients(clients ...*redis.Client) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// syncWriter serialises writes from the demo's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
