package storm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

const (
	// stormLocks locks of stormTTL: every lock renewed each third of its
	// TTL is 40,000 renewals a second, a sixth of what Redis serves on
	// this machine (about 250,000 a second, pipelined) and beyond the
	// fast lane of lockwatch v0.1 (about 30,000 keys a second: it lost
	// 2,500 of 12,000 such locks and most of 20,000 in issue 26's bench).
	stormLocks = 20_000
	stormTTL   = 1500 * time.Millisecond
	// locksEnv sets another number of locks (a positive integer), to find
	// where renewals stop keeping up on a machine.
	locksEnv = "LOCKWATCH_STORM_LOCKS"
	// staleSlack is how much later than two thirds of a TTL after its
	// last confirmation a tracked lock may be seen unrenewed (plus the
	// scheduling lag this process measured): the look at the registry
	// and the renewal's answer race.
	staleSlack = 100 * time.Millisecond
	// A third of the locks is released and obtained again every
	// stormWave, until stormFor has passed since the burst began: two
	// waves, then every lock is released.
	stormWave = 3 * time.Second
	stormFor  = 9 * time.Second
	// workers goroutines obtain and release, as a burst of requests
	// would.
	workers = 32
	// cmdTimeout bounds one obtain or release; tries is how many times
	// one that failed with an error is tried.
	cmdTimeout = 5 * time.Second
	tries      = 5
	// pollEvery is how often the poller reads every held lock's key,
	// pollChunk keys a pipeline.
	pollEvery = 500 * time.Millisecond
	pollChunk = 500
	// most is how many failures of a kind a failure message lists.
	most = 10
)

// TestStorm (issue 26): a watched client obtains stormLocks redislock
// locks of stormTTL in a burst, then releases a third of them and obtains
// them again (new values) every stormWave, for stormFor, and releases
// them all. No lock may be lost: OnLost never called, every release finds
// its lock held, and a poller reading every held lock's key through a
// client nothing watches never finds it gone or holding another value.
// The watchdog's renewals must keep up (I2): every look at the registry
// (one per poll pass) finds every tracked lock confirmed by Redis within
// two thirds of its TTL (staleSlack and the measured lag allowed), and
// the renewals number at least one per two thirds of a TTL each lock was
// held.
func TestStorm(t *testing.T) {
	harness.SkipShort(t, "a storm of 20,000 short locks for 9 s of real time")
	if raceEnabled {
		t.Skip("the storm measures whether renewals keep up with 40,000 a second; the race detector makes the client several times slower " +
			"and go test -race ./... runs other test binaries beside it: .ci/run runs it without -race in a step of its own")
	}
	n := stormLocks
	if v := os.Getenv(locksEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 3 {
			t.Fatalf("%s=%q: want a number of locks, at least 3", locksEnv, v)
		}
	}
	srv := testredis.Start(t)
	rdb := harness.Client(t, srv.Addr)
	// A Stop that hangs fails the test rather than hanging it: in the
	// bench's storm on v0.1 the sweeper once waited forever for sweep
	// pipelines blocked freeing a sweep slot nobody held, and Stop with
	// it (likely an abandon timer that fired as its pipeline answered,
	// acting on the pipeline's next use).
	app := harness.NewApp(t, []*redis.Client{rdb}, harness.Config{LogTail: 10, StopWithin: 30 * time.Second})
	heads := &headrooms{least: 1}
	app.WD.AddObserver(heads)
	s := newStorm(rdb, fmt.Sprintf("storm:%d", time.Now().UnixNano()), n)
	p := &poller{s: s, spy: harness.NewSpy(t, srv.Addr), reg: app.Reg, seen: map[*redislock.Lock]bool{}}

	start := time.Now()
	burst, waves := s.run(context.Background(), p, start)
	held := time.Since(start)
	stats := app.WD.Stats()

	t.Logf("%d locks of %v: %d obtained (burst %v, waves %v), held %v; %d renewals (%.0f/s, %.0f/s needed to renew each lock every third of its TTL), %d failed pipelines, %d renew errors; "+
		"%d renewal pipelines, least headroom at send %.2f of a TTL, %d sent at a third or less; oldest confirmation seen %v; %d OnLost calls (%+v); %d poll passes; %s",
		n, stormTTL, s.obtained.Load(), burst.Round(time.Millisecond), rounded(waves), held.Round(time.Millisecond),
		stats.Renewals, float64(stats.Renewals)/held.Seconds(), float64(n)/(stormTTL/3).Seconds(), stats.Failures, stats.RenewErrors,
		heads.pipelines.Load(), heads.leastNow(), heads.late.Load(), p.oldest.Round(time.Millisecond), len(app.Lost.All()), stats.Losses, p.passes, app.Lag.Note(held))
	judge(t, app, s, p, stats, start)
}

// run runs the storm from start, the poller beside it, and returns how
// long the burst and each wave took.
func (s *storm) run(ctx context.Context, p *poller, start time.Time) (time.Duration, []time.Duration) {
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		p.run(ctx, stop)
	}()
	burst := forEach(s.all(), func(i int) { s.obtain(ctx, i) })
	var waves []time.Duration
	for k := 0; time.Duration(k+1)*stormWave < stormFor; k++ {
		time.Sleep(time.Until(start.Add(time.Duration(k+1) * stormWave)))
		waves = append(waves, forEach(s.third(k), func(i int) {
			s.release(ctx, i)
			s.obtain(ctx, i)
		}))
	}
	time.Sleep(time.Until(start.Add(stormFor)))
	close(stop)
	<-polled
	forEach(s.all(), func(i int) { s.release(ctx, i) })
	return burst, waves
}

// judge gives the verdicts.
func judge(t *testing.T, app *harness.App, s *storm, p *poller, stats watchdog.Stats, start time.Time) {
	t.Helper()
	if errs := s.errs.All(); len(errs) > 0 {
		t.Errorf("%d obtains or releases failed with an error (want none): %s", len(errs), list(errs))
	}
	if lost := app.Lost.All(); len(lost) > 0 {
		t.Errorf("OnLost was called for %d of %d locks (want none; by reason %+v): %s",
			len(lost), s.obtained.Load(), stats.Losses, harness.DescribeLost(lost, start, most))
	}
	if nh := s.notHeld.All(); len(nh) > 0 {
		t.Errorf("%d of %d releases found their lock not held (redislock.ErrLockNotHeld; want none): %s", len(nh), s.obtained.Load(), list(nh))
	}
	if miss := p.misses.All(); len(miss) > 0 {
		t.Errorf("the poller found %d held locks' keys gone or holding another value (want none): %s", len(miss), list(miss))
	}
	limit := 2*stormTTL/3 + staleSlack + app.Lag.Since(start)
	var stale []string
	for _, o := range p.stale.All() {
		if o.age > limit {
			stale = append(stale, o.String())
		}
	}
	if len(stale) > 0 {
		t.Errorf("%d times a look at the registry found a tracked lock last confirmed more than %v ago (two thirds of its TTL, %v slack and the lag; want none: renewals did not keep up, I2): %s",
			len(stale), limit.Round(time.Millisecond), staleSlack, list(stale))
	}
	if stats.DeadlinesMissed != 0 || stats.Unconfirmed != 0 {
		t.Errorf("Stats: DeadlinesMissed %d, Unconfirmed %d; want 0 and 0: no renewal sent past its deadline (the endpoint never behind, I16), no holder told its lock may be lost (I15)", stats.DeadlinesMissed, stats.Unconfirmed)
	}
	if need := s.needed.Load(); stats.Renewals < need {
		t.Errorf("the watchdog renewed %d times; the locks needed at least %d (one per two thirds of a TTL held, I2): renewals did not keep up", stats.Renewals, need)
	}
}

// storm is the application: its locks, a slot per key, and what its
// obtains and releases found.
type storm struct {
	lc    *redislock.Client
	keys  []string
	slots []slot

	obtained atomic.Int64
	// needed counts the renewals the locks released so far needed at
	// least: one per two thirds of a TTL each was held.
	needed  atomic.Int64
	notHeld harness.Log[string]
	errs    harness.Log[string]
}

// slot is one key: the lock held on it now, if any. gen changes when the
// lock is taken away to be released and when a new one is put, so that
// the poller judges only a lock held all along its read.
type slot struct {
	mu    sync.Mutex
	lock  *redislock.Lock // guarded by mu; nil while none is held
	since time.Time       // guarded by mu; when lock was obtained
	gen   uint64          // guarded by mu
}

func newStorm(c *redis.Client, prefix string, n int) *storm {
	s := &storm{lc: redislock.New(c), keys: make([]string, n), slots: make([]slot, n)}
	for i := range s.keys {
		s.keys[i] = fmt.Sprintf("%s:%05d", prefix, i)
	}
	return s
}

// obtain obtains key i's lock, trying again after an error.
func (s *storm) obtain(ctx context.Context, i int) {
	var err error
	for range tries {
		cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		var l *redislock.Lock
		l, err = s.lc.Obtain(cctx, s.keys[i], stormTTL, nil)
		cancel()
		if err == nil {
			sl := &s.slots[i]
			sl.mu.Lock()
			sl.lock, sl.since = l, time.Now()
			sl.gen++
			sl.mu.Unlock()
			s.obtained.Add(1)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.errs.Add(fmt.Sprintf("obtain %s: %v", s.keys[i], err))
}

// release releases key i's lock, if it holds one, trying again after an
// error; a lock found not held is recorded.
func (s *storm) release(ctx context.Context, i int) {
	sl := &s.slots[i]
	sl.mu.Lock()
	l, since := sl.lock, sl.since
	sl.lock = nil
	sl.gen++
	sl.mu.Unlock()
	if l == nil {
		return
	}
	heldFor := time.Since(since)
	s.needed.Add(int64(heldFor / (2 * stormTTL / 3)))
	var err error
	for range tries {
		cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		err = l.Release(cctx)
		cancel()
		if err == nil {
			return
		}
		if errors.Is(err, redislock.ErrLockNotHeld) {
			s.notHeld.Add(fmt.Sprintf("%s held %v", s.keys[i], heldFor.Round(time.Millisecond)))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.errs.Add(fmt.Sprintf("release %s: %v", s.keys[i], err))
}

// all is every key's index; third(k) those of the k-th third (k from 0).
func (s *storm) all() []int { return s.every(0, 1) }

func (s *storm) third(k int) []int { return s.every(k%3, 3) }

func (s *storm) every(from, step int) []int {
	var idx []int
	for i := from; i < len(s.keys); i += step {
		idx = append(idx, i)
	}
	return idx
}

// forEach runs f on each of idx, workers at a time, and returns how long
// that took.
func forEach(idx []int, f func(i int)) time.Duration {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := next.Add(1) - 1; k < int64(len(idx)); k = next.Add(1) - 1 {
				f(idx[k])
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// list shows at most most items of v, and how many more there are.
func list(v []string) string {
	if len(v) > most {
		return strings.Join(v[:most], "; ") + fmt.Sprintf("; ... and %d more", len(v)-most)
	}
	return strings.Join(v, "; ")
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
