package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
)

// releaser releases held locks picked at random and obtains them again.
// A lock is in one call at a time.
type releaser struct {
	lc    *redislock.Client
	locks []*redislock.Lock // locks[i] belongs to the call that set busy[i]
	busy  []atomic.Bool
	again sync.WaitGroup // obtains again in flight

	mu  sync.Mutex
	err error // the first lock that could not be obtained again; guarded by mu
}

// release releases a lock no other call has, picked at random, and
// obtains it again on a goroutine of its own. Only the Release is timed
// (the hook's wait for a renewal in flight is in it).
func (r *releaser) release(ctx context.Context) error {
	i := -1
	for range 100 {
		if j := rand.IntN(len(r.locks)); r.busy[j].CompareAndSwap(false, true) {
			i = j
			break
		}
	}
	if i < 0 {
		return errSkip
	}
	err := r.locks[i].Release(ctx)
	r.again.Add(1)
	go func() {
		defer r.again.Done()
		defer r.busy[i].Store(false)
		if err := r.obtainAgain(context.WithoutCancel(ctx), i, err); err != nil {
			r.mu.Lock()
			r.err = cmp.Or(r.err, err)
			r.mu.Unlock()
		}
	}()
	return err
}

// obtainAgain obtains lock i again after its Release returned err: a
// Release that failed is sent again first, untimed.
func (r *releaser) obtainAgain(ctx context.Context, i int, err error) error {
	for try := 0; err != nil && !errors.Is(err, redislock.ErrLockNotHeld); try++ {
		if try == 10 {
			return fmt.Errorf("release %s: %w", r.locks[i].Key(), err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = r.locks[i].Release(cctx)
		cancel()
	}
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := r.lc.Obtain(cctx, r.locks[i].Key(), neighbourTTL, lockOptions())
		cancel()
		if err == nil {
			r.locks[i] = l
			return nil
		}
		if try == 10 {
			return fmt.Errorf("obtain %s again: %w", r.locks[i].Key(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for the obtains again in flight and returns the first error.
func (r *releaser) wait() error {
	r.again.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
