package exclusion_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// Scenario 7 of the reliability suite.
const (
	lcLocks     = 10000
	lcLongTTL   = time.Minute // the 10k locks: nothing expires during the test
	lcStopLimit = time.Second // the bound on Stop with a sweep in flight
	lcPause     = 400 * time.Millisecond
	lcTTL       = time.Second // (b) and (c): renewed at a third, two thirds of margin for stalls
)

// renewGate is a go-redis hook that sees the watchdog's renew pipelines.
// It reports each one on seen and, while block is set, holds it until its
// context ends instead of sending it: a server that never answers, to a
// client that honours cancellation.
type renewGate struct {
	block atomic.Bool
	seen  chan struct{} // buffered 1: a renew pipeline reached the hook
	count atomic.Int64  // renew script calls that reached the hook
}

var _ redis.Hook = (*renewGate)(nil)

func newRenewGate() *renewGate { return &renewGate{seen: make(chan struct{}, 1)} }

func (g *renewGate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook gates a renew call sent on its own (the watchdog's sweep
// sends one call at a time) as the pipelines are.
func (g *renewGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	pipe := g.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		return next(ctx, cmds[0])
	})
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !harness.IsRenew(cmd) {
			return next(ctx, cmd)
		}
		return pipe(ctx, []redis.Cmder{cmd})
	}
}

func (g *renewGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		renews := 0
		for _, c := range cmds {
			if harness.IsRenew(c) {
				renews++
			}
		}
		if renews == 0 {
			return next(ctx, cmds)
		}
		g.count.Add(int64(renews))
		select {
		case g.seen <- struct{}{}:
		default:
		}
		if g.block.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return next(ctx, cmds)
	}
}

// obtainMany obtains n redislock locks key-0..key-(n-1) through rdb, from
// several goroutines.
func obtainMany(t testing.TB, rdb *redis.Client, prefix string, n int, ttl time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const parallel = 16
	errs := make([]error, parallel)
	var wg sync.WaitGroup
	for g := 0; g < parallel; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += parallel {
				if _, err := redislock.Obtain(ctx, rdb, fmt.Sprintf("%s%d", prefix, i), ttl, nil); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("obtaining %d locks: %v", n, err)
	}
}

// TestLifecycleStopWithSweepInFlight tracks 10,000 locks, starts a sweep,
// and calls Stop while the sweep's renew pipelines wait for Redis: Stop
// returns within a second, the sweep returns the cancellation, and no
// goroutine is left (goleak, against the goroutines that ran before
// Attach). Two kinds of waiting: a pipeline held by a hook until its
// context ends (Stop must cancel it), and a server paused by CLIENT PAUSE
// for 400 ms (Stop must wait for the answer, and not send more).
func TestLifecycleStopWithSweepInFlight(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
	defer rdb.Close()
	spy := harness.Client(t, srv.Addr) // never watched
	reg := harness.Watch(t, rdb)
	gate := newRenewGate()
	rdb.AddHook(gate)
	started := time.Now()
	obtainMany(t, rdb, "lc:many:", lcLocks, lcLongTTL)
	if n := reg.Len(); n != lcLocks {
		t.Fatalf("tracked locks: got %d, want %d", n, lcLocks)
	}
	t.Logf("%d locks obtained and tracked in %v", lcLocks, time.Since(started).Round(time.Millisecond))

	for _, tc := range []struct {
		name  string
		block bool // hold the pipelines in the hook; else pause the server
	}{
		{"pipeline held until cancelled", true},
		{"server paused", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := spy.Ping(ctx).Err(); err != nil { // connected before the pause
				t.Fatalf("PING: %v", err)
			}
			select { // forget a pipeline seen by an earlier subtest
			case <-gate.seen:
			default:
			}
			before := goleak.IgnoreCurrent()
			wd, err := watchdog.Attach(reg)
			if err != nil {
				t.Fatalf("Attach: %v", err)
			}
			gate.block.Store(tc.block)
			defer gate.block.Store(false)
			if !tc.block {
				if err := spy.Do(ctx, "CLIENT", "PAUSE", lcPause.Milliseconds(), "ALL").Err(); err != nil {
					t.Fatalf("CLIENT PAUSE: %v", err)
				}
			}
			pausedAt := time.Now()
			sweepDone := make(chan error, 1)
			go func() { sweepDone <- wd.Sweep(ctx) }()
			select {
			case <-gate.seen:
			case err := <-sweepDone:
				t.Fatalf("Sweep returned %v before any renew pipeline was sent", err)
			case <-ctx.Done():
				t.Fatalf("no renew pipeline within 30s")
			}
			if !tc.block {
				time.Sleep(20 * time.Millisecond) // let the pipelines reach the paused server
			}
			select {
			case err := <-sweepDone:
				t.Fatalf("the sweep ended (%v) before Stop: not in flight", err)
			default:
			}
			sweepsBefore := wd.Stats().Sweeps
			stopAt := time.Now()
			wd.Stop()
			took := time.Since(stopAt)
			var sweepErr error
			select {
			case sweepErr = <-sweepDone:
			case <-time.After(10 * time.Second):
				t.Fatalf("Sweep did not return within 10s of Stop")
			}
			st := wd.Stats()
			how := "renew pipelines held by the hook"
			if !tc.block {
				how = fmt.Sprintf("server paused for %v from %v before Stop", lcPause, stopAt.Sub(pausedAt).Round(time.Millisecond))
			}
			t.Logf("Stop took %v with %d tracked locks (%s); Sweep returned %v; Stats: sweeps %d (%d before Stop), renewals %d, failed renew calls %d, lost %d",
				took.Round(time.Microsecond), reg.Len(), how, sweepErr, st.Sweeps, sweepsBefore, st.Renewals, st.Failures, st.Lost)
			if took >= lcStopLimit {
				t.Errorf("Stop with a sweep in flight took %v, want < %v", took, lcStopLimit)
			}
			if !errors.Is(sweepErr, watchdog.ErrStopped) {
				t.Errorf("Sweep in flight at Stop: got %v, want ErrStopped (Stop ended the sweep)", sweepErr)
			}
			if st.Lost != 0 {
				t.Errorf("locks reported lost: got %d, want 0", st.Lost)
			}
			if err := wd.Sweep(ctx); !errors.Is(err, watchdog.ErrStopped) {
				t.Errorf("Sweep after Stop: got %v, want ErrStopped", err)
			}
			goleak.VerifyNone(t, before)
			if !tc.block {
				// Leave the server answering for the next subtest.
				time.Sleep(time.Until(pausedAt.Add(lcPause)))
			}
		})
	}
	if n := reg.Len(); n != lcLocks {
		t.Errorf("tracked locks after Stop: got %d, want %d (Stop leaves them tracked)", n, lcLocks)
	}
}

// lockState reads key through an unwatched client, or fails t.
func lockState(t testing.TB, spy *redis.Client, key string) harness.KeyState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := harness.ReadKeys(ctx, spy, []string{key}, harness.Atomic)[key]
	if s.Err != nil {
		t.Fatalf("GET+PTTL %s: %v", key, s.Err)
	}
	return s
}

// checkHeld fails unless every lock still holds its value.
func checkHeld(t testing.TB, spy *redis.Client, when string, locks ...*harness.Held) {
	t.Helper()
	for _, l := range locks {
		s := lockState(t, spy, l.Key)
		if !s.Holds(l.Value) {
			t.Errorf("%s: %s lock %s: got value %q (exists %v), want %q held", when, l.Lib, l.Key, s.Value, s.Exists, l.Value)
			continue
		}
		t.Logf("%s: %s lock %s held, PTTL %v", when, l.Lib, l.Key, s.PTTL)
	}
}

// TestLifecycleAttachStopAttach attaches a watchdog, stops it and attaches
// another on the same registry: the second renews the locks (they outlive
// several TTLs), the first renews nothing after Stop, and a third Attach
// while the second runs is refused with ErrAttached.
func TestLifecycleAttachStopAttach(t *testing.T) {
	srv := testredis.Start(t)
	rdb := harness.Client(t, srv.Addr)
	spy := harness.Client(t, srv.Addr)
	reg := harness.Watch(t, rdb)
	gate := newRenewGate()
	rdb.AddHook(gate)

	wd1, err := watchdog.Attach(reg)
	if err != nil {
		t.Fatalf("first Attach: %v", err)
	}
	defer wd1.Stop()
	locks := []*harness.Held{
		harness.MustObtain(t, harness.Redislock, rdb, "lc:again:redislock", lcTTL),
		harness.MustObtain(t, harness.Redsync, rdb, "lc:again:redsync", lcTTL),
	}
	if _, err := watchdog.Attach(reg); !errors.Is(err, watchdog.ErrAttached) {
		t.Errorf("Attach while the first runs: got %v, want ErrAttached", err)
	}
	time.Sleep(3 * lcTTL)
	checkHeld(t, spy, "first watchdog, 3 TTLs", locks...)
	wd1.Stop()
	first := wd1.Stats()
	renewsAtStop := gate.count.Load()
	time.Sleep(lcTTL / 10)
	if n := gate.count.Load() - renewsAtStop; n != 0 {
		t.Errorf("renew calls after the first watchdog stopped, none attached: got %d, want 0", n)
	}

	wd2, err := watchdog.Attach(reg)
	if err != nil {
		t.Fatalf("Attach after Stop: got %v, want nil", err)
	}
	defer wd2.Stop()
	if _, err := watchdog.Attach(reg); !errors.Is(err, watchdog.ErrAttached) {
		t.Errorf("Attach while the second runs: got %v, want ErrAttached", err)
	}
	time.Sleep(3 * lcTTL)
	checkHeld(t, spy, "second watchdog, 3 more TTLs", locks...)
	second := wd2.Stats()
	if after := wd1.Stats(); !reflect.DeepEqual(after, first) {
		t.Errorf("first watchdog's Stats after its Stop: got %+v, want unchanged %+v", after, first)
	}
	t.Logf("first watchdog: renewals %d, lost %d; second: renewals %d, lost %d", first.Renewals, first.Lost, second.Renewals, second.Lost)
	if first.Renewals == 0 || second.Renewals == 0 {
		t.Errorf("renewals: first %d, second %d, want both > 0", first.Renewals, second.Renewals)
	}
	if first.Lost != 0 || second.Lost != 0 {
		t.Errorf("lost: first %d, second %d, want 0", first.Lost, second.Lost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s release %s: %v, want nil", l.Lib, l.Key, err)
		}
	}
	wd2.Stop()
}

// TestLifecycleWatchAfterTraffic watches a client that already served
// traffic (plain commands, a pipeline, and a lock of each library obtained
// before Watch): the locks obtained before Watch are not tracked and expire
// within their TTL; the locks obtained after Watch are tracked, renewed and
// released.
func TestLifecycleWatchAfterTraffic(t *testing.T) {
	srv := testredis.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := harness.Client(t, srv.Addr)
	spy := harness.Client(t, srv.Addr)

	// Traffic before Watch.
	if err := rdb.Set(ctx, "lc:traffic:plain", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "lc:traffic:counter")
		p.Get(ctx, "lc:traffic:plain")
		return nil
	}); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	before := []*harness.Held{
		harness.MustObtain(t, harness.Redislock, rdb, "lc:traffic:before:redislock", lcTTL),
		harness.MustObtain(t, harness.Redsync, rdb, "lc:traffic:before:redsync", lcTTL),
	}
	obtainedBefore := time.Now()

	reg := harness.Watch(t, rdb) // after traffic
	wd, err := watchdog.Attach(reg)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer wd.Stop()
	after := []*harness.Held{
		harness.MustObtain(t, harness.Redislock, rdb, "lc:traffic:after:redislock", lcTTL),
		harness.MustObtain(t, harness.Redsync, rdb, "lc:traffic:after:redsync", lcTTL),
	}
	tracked := make(map[string]string)
	for _, l := range reg.Locks() {
		tracked[l.Key] = l.Value
	}
	for _, l := range before {
		if _, ok := tracked[l.Key]; ok {
			t.Errorf("%s lock %s obtained before Watch is tracked, want not", l.Lib, l.Key)
		}
	}
	for _, l := range after {
		if v, ok := tracked[l.Key]; !ok || v != l.Value {
			t.Errorf("%s lock %s obtained after Watch: tracked %v with %q, want tracked with %q", l.Lib, l.Key, ok, v, l.Value)
		}
	}

	time.Sleep(3 * lcTTL)
	checkHeld(t, spy, "3 TTLs after Watch", after...)
	for _, l := range before {
		// Not tracked, so nobody renewed it: it expired a TTL after it
		// was obtained, two TTLs ago.
		if s := lockState(t, spy, l.Key); s.Exists {
			t.Errorf("%s lock %s obtained before Watch, %v later: still held (%q, PTTL %v), want expired (TTL %v)", l.Lib, l.Key, time.Since(obtainedBefore), s.Value, s.PTTL, lcTTL)
		}
	}
	if v, err := spy.Get(ctx, "lc:traffic:plain").Result(); err != nil || v != "v" {
		t.Errorf("GET of the plain key: got %q, %v, want \"v\"", v, err)
	}
	for _, l := range reg.Locks() {
		t.Logf("tracked %s (%s): %d renewals", l.Key, l.Source, l.Renewals)
		if l.Renewals == 0 {
			t.Errorf("%s: 0 renewals in 3 TTLs, want > 0", l.Key)
		}
	}
	for _, l := range after {
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s release %s: %v, want nil", l.Lib, l.Key, err)
		}
	}
	if n := reg.Len(); n != 0 {
		t.Errorf("tracked locks after release: got %d, want 0", n)
	}
	st := wd.Stats()
	t.Logf("Stats: renewals %d, lost %d, failed renew calls %d", st.Renewals, st.Lost, st.Failures)
	if st.Lost != 0 {
		t.Errorf("lost: got %d, want 0", st.Lost)
	}
}
