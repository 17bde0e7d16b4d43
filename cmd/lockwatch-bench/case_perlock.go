package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// perLockBench is one goroutine and one ticker per lock, each calling
// redislock's Refresh on its tick. Its rounds come with its tickers: a
// sweep is the next round.
type perLockBench struct {
	obs, rdb *redis.Client
	n        int
	mem, kv  int64
	period   time.Duration
	t0       time.Time
	round    int // the next round to measure

	startNS  []atomic.Int64 // per round: the earliest tick
	done     []atomic.Int64 // per round: refreshes done
	finished []chan time.Time
	failed   []atomic.Int64 // per round: refreshes that failed
	stop     chan struct{}
	exited   sync.WaitGroup
}

// defaultPerLockPoolTimeout is the per-lock client's PoolTimeout unless
// -per-lock-pool-timeout sets perLockPoolTimeout.
const defaultPerLockPoolTimeout = time.Hour

var perLockPoolTimeout = defaultPerLockPoolTimeout

// perLockRounds bounds the rounds a perLockBench can measure.
const perLockRounds = 16

func setupPerLock(ctx context.Context, addr, prefix string, n int) (bench, error) {
	b := &perLockBench{
		obs: redis.NewClient(&redis.Options{Addr: addr}),
		// With the default PoolTimeout (4 s), a refresh that waits longer
		// for one of the pool's connections fails, as in any round longer
		// than 4 s: the design is measured at its best, with a pool wait
		// that never gives up (perLockPoolTimeout, unless
		// -per-lock-pool-timeout says otherwise).
		rdb:      redis.NewClient(&redis.Options{Addr: addr, PoolTimeout: perLockPoolTimeout}),
		n:        n,
		startNS:  make([]atomic.Int64, perLockRounds),
		done:     make([]atomic.Int64, perLockRounds),
		failed:   make([]atomic.Int64, perLockRounds),
		finished: make([]chan time.Time, perLockRounds),
		stop:     make(chan struct{}),
	}
	for i := range b.startNS {
		b.startNS[i].Store(1<<63 - 1)
		b.finished[i] = make(chan time.Time, 1)
	}
	if err := warm(ctx, b.rdb, obtainWorkers); err != nil {
		b.close()
		return nil, err
	}
	locks := make([]*redislock.Lock, n)
	var err error
	if b.kv, err = obtainAll(ctx, b.rdb, prefix, n, func(i int, l *redislock.Lock) { locks[i] = l }); err != nil {
		b.close()
		return nil, err
	}
	if b.period, err = calibratePeriod(ctx, locks, n); err != nil {
		b.close()
		return nil, err
	}
	// The locks are the application's in both designs: the figure is the
	// goroutines and tickers.
	before := liveBytes()
	var ready sync.WaitGroup
	begin := make(chan struct{})
	ready.Add(n)
	b.exited.Add(n)
	for _, l := range locks {
		go b.hold(ctx, l, begin, &ready)
	}
	b.t0 = time.Now()
	close(begin)
	ready.Wait()
	b.mem = liveBytes() - before
	return b, nil
}

// hold is one lock's goroutine.
func (b *perLockBench) hold(ctx context.Context, l *redislock.Lock, begin chan struct{}, ready *sync.WaitGroup) {
	defer b.exited.Done()
	<-begin
	tk := time.NewTicker(b.period)
	defer tk.Stop()
	ready.Done()
	for round := 0; ; round++ {
		select {
		case <-b.stop:
			return
		case at := <-tk.C:
			if round >= perLockRounds {
				continue
			}
			for ns := at.UnixNano(); ; {
				cur := b.startNS[round].Load()
				if ns >= cur || b.startNS[round].CompareAndSwap(cur, ns) {
					break
				}
			}
			if err := l.Refresh(ctx, lockTTL, nil); err != nil {
				b.failed[round].Add(1)
			}
			if b.done[round].Add(1) == int64(b.n) {
				b.finished[round] <- time.Now()
			}
		}
	}
}

func (b *perLockBench) sweep(ctx context.Context) (sample, error) {
	// Measure the first round whose ticks have not come yet: when a round
	// took longer than expected, the next may already be under way.
	round := b.round
	for round < perLockRounds && time.Until(b.t0.Add(time.Duration(round+1)*b.period)) < 50*time.Millisecond {
		round++
	}
	if round >= perLockRounds {
		return sample{}, fmt.Errorf("per-lock measures at most %d rounds", perLockRounds)
	}
	b.round = round + 1
	due := b.t0.Add(time.Duration(round+1) * b.period)
	time.Sleep(time.Until(due.Add(-20 * time.Millisecond)))
	m, err := startMeter(ctx, b.obs)
	if err != nil {
		return sample{}, err
	}
	end := <-b.finished[round]
	s, err := m.stop(ctx, end)
	if err != nil {
		return sample{}, err
	}
	s.wall = end.Sub(time.Unix(0, b.startNS[round].Load()))
	s.failed = b.failed[round].Load()
	if s.failed > 0 && perLockPoolTimeout == defaultPerLockPoolTimeout {
		return sample{}, fmt.Errorf("%d refreshes failed", s.failed)
	}
	return s, nil
}

func (b *perLockBench) finish() result {
	return result{
		BytesPerLock:  float64(b.mem) / float64(b.n),
		KeyValueBytes: float64(b.kv) / float64(b.n),
		Note:          fmt.Sprintf("ticker period %v; B/lock is the goroutine and ticker (the Lock is the application's)", b.period.Round(time.Millisecond)),
	}
}

func (b *perLockBench) close() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	b.exited.Wait()
	_ = b.rdb.Close()
	_ = b.obs.Close()
}

// calibratePeriod picks the per-lock tickers' period: twice the time a
// round of n refreshes is expected to take, so that rounds never overlap.
func calibratePeriod(ctx context.Context, locks []*redislock.Lock, n int) (time.Duration, error) {
	sampleN := min(n, 2000)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs atomic.Int64
	)
	t := time.Now()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= sampleN {
					return
				}
				if err := locks[i].Refresh(ctx, lockTTL, nil); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() > 0 {
		return 0, fmt.Errorf("calibration: %d refreshes failed", errs.Load())
	}
	// A round of n goroutines is slower per lock than the sample (the
	// scheduler has n goroutines to wake): 20µs a lock is a floor, from a
	// million locks on this project's 2-core machine.
	perLock := max(time.Since(t)/time.Duration(sampleN), 20*time.Microsecond)
	return max(time.Second, (2 * perLock * time.Duration(n)).Round(100*time.Millisecond)), nil
}
