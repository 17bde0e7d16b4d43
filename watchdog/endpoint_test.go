package watchdog_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// twoEnv is two miniredis servers, each with a watched client, in one
// registry.
type twoEnv struct {
	ms   [2]*miniredis.Miniredis
	rdbs [2]*redis.Client
	obs  [2]*redis.Client
	reg  *registry.Registry
}

func newTwoEnv(t *testing.T) *twoEnv {
	t.Helper()
	e := &twoEnv{reg: registry.New(setAdapter{})}
	for i := range 2 {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		dial := memconn.Dialer(m)
		e.ms[i] = m
		e.rdbs[i] = redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: dial, MaxRetries: -1})
		e.obs[i] = redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: dial})
		if err := e.reg.Watch(e.rdbs[i]); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range 2 {
			_ = e.rdbs[i].Close()
			_ = e.obs[i].Close()
			e.ms[i].Close()
		}
	})
	return e
}

func (e *twoEnv) obtain(t *testing.T, i int, key string, ttl time.Duration) {
	t.Helper()
	if ok, err := e.rdbs[i].SetNX(context.Background(), key, "me", ttl).Result(); !ok || err != nil {
		t.Fatalf("SET %s NX on server %d = %v, %v", key, i, ok, err)
	}
}

// I9 and the per-endpoint stats: one server failing for longer than every
// TTL delays no renewal on the other; Stats says which endpoint is down.
func TestFailingEndpointDelaysNoOther(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newTwoEnv(t)
		var lost lossLog
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
		for _, k := range []string{"a1", "a2"} {
			e.obtain(t, 0, k, 500*time.Millisecond)
		}
		for _, k := range []string{"b1", "b2"} {
			e.obtain(t, 1, k, 500*time.Millisecond)
		}
		time.Sleep(time.Second)
		e.ms[0].SetError("LOADING Redis is loading the dataset in memory")
		lowest := time.Hour
		for range 100 {
			time.Sleep(20 * time.Millisecond)
			for _, k := range []string{"b1", "b2"} {
				lowest = min(lowest, e.obs[1].PTTL(context.Background(), k).Val())
			}
		}
		if lowest < 500*time.Millisecond/3 {
			t.Errorf("lowest PTTL on the healthy server while the other failed for 2s = %v, want >= %v", lowest, 500*time.Millisecond/3)
		}
		keys, errs := lost.get()
		if len(keys) != 2 {
			t.Fatalf("OnLost = %v, want a1 and a2 (their server failed for 4 TTLs)", keys)
		}
		for i, err := range errs {
			var ue *watchdog.UnreachableError
			if !errors.Is(err, watchdog.ErrUnreachable) || !errors.As(err, &ue) || ue.Err == nil ||
				!redis.HasErrorPrefix(ue.Err, "LOADING") {
				t.Errorf("OnLost(%s) = %v, want an UnreachableError wrapping the LOADING reply", keys[i], err)
			}
		}
		st := wd.Stats()
		if len(st.Endpoints) != 2 || !st.Endpoints[0].Down || st.Endpoints[1].Down ||
			st.Endpoints[0].Failed == 0 || st.Endpoints[1].Failed != 0 || st.Endpoints[1].Renewed == 0 ||
			st.Endpoints[0].Lost != 2 || st.Endpoints[0].LastError == nil {
			t.Errorf("Stats().Endpoints = %+v, want the first down with failures, 2 lost and its error, the second renewing", st.Endpoints)
		}
		e.ms[0].SetError("")
	})
}

// OnLost runs on a goroutine of its own, one call at a time, in order: a
// slow callback delays no renewal, and every lock is reported once.
func TestSlowOnLostDelaysNoRenewal(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var (
			mu    sync.Mutex
			order []string
		)
		slow := func(l registry.Lock, err error) {
			time.Sleep(3 * time.Second)
			mu.Lock()
			order = append(order, l.Key)
			mu.Unlock()
		}
		attach(t, e.reg, watchdog.WithOnLost(slow), watchdog.WithStopTimeout(10*time.Second))
		for _, k := range []string{"gone1", "gone2", "healthy"} {
			e.obtain(t, k, "me", 300*time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		e.observer.Del(context.Background(), "gone1")
		time.Sleep(200 * time.Millisecond)
		e.observer.Del(context.Background(), "gone2")
		lowest := time.Hour
		for range 400 {
			time.Sleep(20 * time.Millisecond)
			lowest = min(lowest, e.pttl("healthy"))
		}
		if lowest < 100*time.Millisecond {
			t.Errorf("lowest PTTL of the healthy lock while OnLost ran = %v, want >= 100ms", lowest)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(order) != 2 || order[0] != "gone1" || order[1] != "gone2" {
			t.Errorf("OnLost calls = %v, want gone1 then gone2, once each", order)
		}
	})
}

// A panicking OnLost is contained: the next loss is still reported.
func TestPanickingOnLost(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var lost lossLog
		calls := 0
		attach(t, e.reg, watchdog.WithOnLost(func(l registry.Lock, err error) {
			calls++
			if calls == 1 {
				panic("boom")
			}
			lost.onLost(l, err)
		}))
		e.obtain(t, "a", "me", 300*time.Millisecond)
		e.obtain(t, "b", "me", 300*time.Millisecond)
		e.observer.Del(context.Background(), "a", "b")
		time.Sleep(time.Second)
		if keys, _ := lost.get(); len(keys) != 1 || calls != 2 {
			t.Errorf("after a panicking OnLost: %d calls, reported %v; want 2 calls", calls, keys)
		}
	})
}

// A client the application closed is given up at once: its locks are
// reported with ErrUnreachable wrapping redis.ErrClosed, and it is no
// longer swept.
func TestClosedClientIsGivenUp(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var lost lossLog
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost), watchdog.WithSchedule("@every 1s"))
		e.obtain(t, "a", "me", 5*time.Second)
		e.obtain(t, "b", "me", 300*time.Millisecond)
		// Closed between two renewals (they go out on whole multiples of
		// 100 ms here): go-redis v9.4 adds a connection dialled while the
		// client closes to the closed pool and never closes it, which
		// would leave a goroutine in the bubble.
		time.Sleep(time.Second + 50*time.Millisecond)
		_ = e.rdb.Close()
		time.Sleep(2 * time.Second)
		keys, errs := lost.get()
		if len(keys) != 2 {
			t.Fatalf("OnLost = %v, want a and b", keys)
		}
		for i, err := range errs {
			if !errors.Is(err, watchdog.ErrUnreachable) || !errors.Is(err, redis.ErrClosed) {
				t.Errorf("OnLost(%s) = %v, want ErrUnreachable wrapping redis.ErrClosed", keys[i], err)
			}
		}
		if n := e.reg.Len(); n != 0 {
			t.Errorf("Len() = %d after the client was closed, want 0", n)
		}
		before := wd.Stats()
		time.Sleep(3 * time.Second)
		if after := wd.Stats(); after.Failures != before.Failures || len(after.Endpoints) != 0 {
			t.Errorf("after the client was given up: failures %d -> %d, endpoints %v; want no more renewals", before.Failures, after.Failures, after.Endpoints)
		}
	})
}
