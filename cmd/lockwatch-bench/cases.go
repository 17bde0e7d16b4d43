package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
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

// lockwatchBench is locks obtained through redislock on a watched client
// and renewed by a watchdog, swept with Sweep.
type lockwatchBench struct {
	obs, rdb  *redis.Client
	wd        *watchdog.Watchdog
	n         int
	mem, kv   int64
	setupPeak float64 // peak RSS after the locks were obtained, MB
}

func setupLockwatch(ctx context.Context, addr, prefix string, n int) (bench, error) {
	b := &lockwatchBench{
		obs: redis.NewClient(&redis.Options{Addr: addr}),
		rdb: redis.NewClient(&redis.Options{Addr: addr}),
		n:   n,
	}
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(b.rdb); err != nil {
		b.close()
		return nil, err
	}
	var err error
	if b.wd, err = watchdog.Attach(reg, watchdog.WithSchedule(lockwatchSchedule)); err != nil {
		b.close()
		return nil, err
	}
	if err := warm(ctx, b.rdb, obtainWorkers); err != nil {
		b.close()
		return nil, err
	}
	before := liveBytes()
	// The application keeps its *redislock.Lock values in both designs;
	// here they are dropped, so the figure is what the registry keeps
	// (with the key and value strings, which the application shares).
	if b.kv, err = obtainAll(ctx, b.rdb, prefix, n, nil); err != nil {
		b.close()
		return nil, err
	}
	b.mem = liveBytes() - before
	b.setupPeak = peakRSSMB()
	if got := reg.Len(); got != n {
		b.close()
		return nil, fmt.Errorf("registry tracks %d locks, want %d", got, n)
	}
	return b, nil
}

func (b *lockwatchBench) sweep(ctx context.Context) (sample, error) {
	renewed := b.wd.Stats().Renewals
	m, err := startMeter(ctx, b.obs)
	if err != nil {
		return sample{}, err
	}
	if err := b.wd.Sweep(ctx); err != nil {
		return sample{}, fmt.Errorf("sweep: %w", err)
	}
	s, err := m.stop(ctx, time.Now())
	if err != nil {
		return sample{}, err
	}
	if got := b.wd.Stats().Renewals - renewed; got != int64(b.n) {
		return sample{}, fmt.Errorf("a sweep renewed %d locks, want %d", got, b.n)
	}
	return s, nil
}

func (b *lockwatchBench) finish() result {
	return result{
		BytesPerLock:  float64(b.mem) / float64(b.n),
		KeyValueBytes: float64(b.kv) / float64(b.n),
		Note:          fmt.Sprintf("peak RSS %.0f MB once the locks were obtained, before any sweep", b.setupPeak),
	}
}

func (b *lockwatchBench) close() {
	if b.wd != nil {
		b.wd.Stop()
	}
	_ = b.rdb.Close()
	_ = b.obs.Close()
}

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

// ownedTable is what a renewer that does not watch the client keeps: each
// lock's key and value, as a map like Redisson's renewal map.
type ownedTable map[string]string

// setLocks creates n lock keys with random values through c, pipelined, and
// returns them as a table.
func setLocks(ctx context.Context, c *redis.Client, prefix string, n int) (ownedTable, int64, error) {
	t := make(ownedTable, n)
	var kv int64
	buf := make([]byte, 16)
	for start := 0; start < n; start += ceilingBatch {
		pipe := c.Pipeline()
		for i := start; i < min(n, start+ceilingBatch); i++ {
			if _, err := rand.Read(buf); err != nil {
				return nil, 0, err
			}
			k, v := lockKey(prefix, i), base64.RawURLEncoding.EncodeToString(buf)
			t[k] = v
			kv += int64(len(k) + len(v))
			pipe.SetNX(ctx, k, v, lockTTL)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, 0, fmt.Errorf("create locks: %w", err)
		}
	}
	return t, kv, nil
}

// redissonScript renews a batch the way Redisson's watchdog does: one lease
// time for the batch (ARGV[1]), each key's owner in ARGV[i+1]; a key is
// extended only while it holds its owner's value.
var redissonScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS do
  if redis.call("get", KEYS[i]) == ARGV[i + 1] then
    out[i] = redis.call("pexpire", KEYS[i], ARGV[1])
  else
    out[i] = 0
  end
end
return out`)

// ceilingScript is an owner-checked PEXPIRE of one key.
var ceilingScript = redis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0`)

// tableBench is a renewer that keeps its own table of locks and renews it
// with sweep, on one connection.
type tableBench struct {
	obs, rdb *redis.Client
	table    ownedTable
	n        int
	mem, kv  int64
	impl     string
	renew    func(context.Context, *redis.Client, ownedTable, func(int) error) (int, error)
}

func setupRedissonStyle(ctx context.Context, addr, prefix string, n int) (bench, error) {
	return setupTable(ctx, addr, prefix, n, "redisson-style", redissonSweep)
}

func setupCeiling(ctx context.Context, addr, prefix string, n int) (bench, error) {
	return setupTable(ctx, addr, prefix, n, "ceiling", ceilingSweep)
}

func setupTable(ctx context.Context, addr, prefix string, n int, impl string,
	renew func(context.Context, *redis.Client, ownedTable, func(int) error) (int, error)) (bench, error) {
	b := &tableBench{
		obs:   redis.NewClient(&redis.Options{Addr: addr}),
		rdb:   redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1}), // one connection
		n:     n,
		impl:  impl,
		renew: renew,
	}
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		b.close()
		return nil, err
	}
	before := liveBytes()
	var err error
	if b.table, b.kv, err = setLocks(ctx, b.rdb, prefix, n); err != nil {
		b.close()
		return nil, err
	}
	b.mem = liveBytes() - before
	for _, s := range []*redis.Script{redissonScript, ceilingScript} {
		if err := s.Load(ctx, b.rdb).Err(); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *tableBench) sweep(ctx context.Context) (sample, error) {
	m, err := startMeter(ctx, b.obs)
	if err != nil {
		return sample{}, err
	}
	renewed, err := b.renew(ctx, b.rdb, b.table, nil)
	if err != nil {
		return sample{}, err
	}
	s, err := m.stop(ctx, time.Now())
	if err != nil {
		return sample{}, err
	}
	if renewed != b.n {
		return sample{}, fmt.Errorf("%s renewed %d locks, want %d", b.impl, renewed, b.n)
	}
	return s, nil
}

func (b *tableBench) finish() result {
	return result{
		BytesPerLock:  float64(b.mem) / float64(b.n),
		KeyValueBytes: float64(b.kv) / float64(b.n),
	}
}

func (b *tableBench) close() {
	_ = b.rdb.Close()
	_ = b.obs.Close()
}

// redissonSweep renews the table in chunks of 100 keys, one script call
// after another, and ends the sweep at the first chunk that fails, as
// Redisson's renewal task does. fail, when not nil, may inject an error for
// chunk i. It returns the number of locks renewed.
func redissonSweep(ctx context.Context, c *redis.Client, t ownedTable, fail func(int) error) (int, error) {
	keys := make([]string, 0, redissonChunk)
	args := make([]any, 1, redissonChunk+1)
	args[0] = lockTTL.Milliseconds()
	renewed, chunk := 0, 0
	flush := func() error {
		defer func() { keys, args, chunk = keys[:0], args[:1], chunk+1 }()
		if fail != nil {
			if err := fail(chunk); err != nil {
				return err
			}
		}
		res, err := redissonScript.EvalSha(ctx, c, keys, args...).Int64Slice()
		if err != nil {
			return err
		}
		for _, r := range res {
			if r == 1 {
				renewed++
			}
		}
		return nil
	}
	for k, v := range t {
		keys = append(keys, k)
		args = append(args, v)
		if len(keys) == redissonChunk {
			if err := flush(); err != nil {
				return renewed, err
			}
		}
	}
	if len(keys) > 0 {
		if err := flush(); err != nil {
			return renewed, err
		}
	}
	return renewed, nil
}

// ceilingSweep renews the table with one single-key script call per lock,
// pipelined ceilingBatch at a time on one connection.
func ceilingSweep(ctx context.Context, c *redis.Client, t ownedTable, _ func(int) error) (int, error) {
	ttl := lockTTL.Milliseconds()
	renewed := 0
	pipe := c.Pipeline()
	var cmds []*redis.Cmd
	flush := func() error {
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, cmd := range cmds {
			if cmd.Val() == int64(1) {
				renewed++
			}
		}
		cmds = cmds[:0]
		return nil
	}
	for k, v := range t {
		cmds = append(cmds, ceilingScript.EvalSha(ctx, pipe, []string{k}, v, ttl))
		if len(cmds) == ceilingBatch {
			if err := flush(); err != nil {
				return renewed, err
			}
		}
	}
	if len(cmds) > 0 {
		if err := flush(); err != nil {
			return renewed, err
		}
	}
	return renewed, nil
}
