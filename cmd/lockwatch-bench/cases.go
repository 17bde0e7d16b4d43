package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
)

const (
	// lockTTL is the TTL of every benchmark lock: long enough that nothing
	// expires and lockwatch's fast lane stays idle, so that a sweep is
	// measured alone. A sweep's cost does not depend on the TTL.
	lockTTL = 2 * time.Hour
	// lockwatchSchedule is far away: the bench drives sweeps with Sweep.
	lockwatchSchedule = "@every 1h"
	// obtainWorkers is how many goroutines obtain the locks of a case.
	obtainWorkers = 64
	// redissonChunk is Redisson's batch: 100 keys per script call.
	redissonChunk = 100
	// ceilingBatch is the number of commands per pipeline of the ceiling.
	ceilingBatch = 1000
)

// bench is one case, set up with its locks in a child process.
type bench interface {
	// sweep renews every lock once and measures it.
	sweep(ctx context.Context) (sample, error)
	// finish returns the case's figures other than the sweeps'.
	finish() result
	close()
}

// setupFunc sets a case up with n locks whose keys start with prefix.
type setupFunc func(ctx context.Context, addr, prefix string, n int) (bench, error)

var cases = map[string]setupFunc{
	"lockwatch":      setupLockwatch,
	"per-lock":       setupPerLock,
	"redisson-style": setupRedissonStyle,
	"ceiling":        setupCeiling,
}

// caseOrder is the order of the report.
var caseOrder = []string{"lockwatch", "per-lock", "redisson-style", "ceiling"}

// interleaved are the cases whose sweeps are driven one at a time in turn,
// so that the machine's load changes affect them alike. per-lock is driven
// by its own tickers and runs alone afterwards.
func interleaved(impl string) bool { return impl != "per-lock" }

// obtainAll obtains locks 0..n-1 with redislock through c, obtainWorkers
// at a time, and hands each to keep (which may be nil).
func obtainAll(ctx context.Context, c redislock.RedisClient, prefix string, n int, keep func(int, *redislock.Lock)) (valueBytes int64, err error) {
	lc := redislock.New(c)
	var (
		next  atomic.Int64
		total atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range obtainWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				l, err := lc.Obtain(ctx, lockKey(prefix, i), lockTTL, nil)
				if err != nil {
					mu.Lock()
					first = errors.Join(first, fmt.Errorf("obtain %s: %w", lockKey(prefix, i), err))
					mu.Unlock()
					return
				}
				total.Add(int64(len(l.Key()) + len(l.Token()) + len(l.Metadata())))
				if keep != nil {
					keep(i, l)
				}
			}
		}()
	}
	wg.Wait()
	return total.Load(), first
}
