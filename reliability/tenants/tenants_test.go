package tenants_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

const (
	// tenants clients come and go, at most together at a time; each
	// obtains locksEach redislock locks of lockTTL through its client,
	// holds them for holdFor (the watchdog renews them: a third of their
	// TTL passes), releases them and closes the client.
	tenants   = 400
	together  = 20
	locksEach = 5
	lockTTL   = 300 * time.Millisecond
	holdFor   = 150 * time.Millisecond
	// What the tenants may leave behind once they are gone (issue 27):
	// goroutines and heap, against before the first came.
	goroutineSlack = 10
	heapSlack      = 2 << 20
	// settleWithin bounds the wait for the lanes of the last clients to
	// retire (a second after their last lock) and for the collector to
	// take the clients.
	settleWithin = 20 * time.Second
)

// TestTenantsComeAndGo: 400 tenant clients, each watched, used for 5
// locks of 300 ms held 150 ms and closed, leave no goroutine, no heap and
// no endpoint in Stats behind them (issue 27: 400 such clients left +798
// goroutines, +14 MiB of heap and 400 endpoints in Stats, for good). The
// locks are renewed while held: each tenant's client got lanes of its own.
func TestTenantsComeAndGo(t *testing.T) {
	srv := testredis.Start(t)
	reg := registry.New(bsmredislock.New(), goredsync.New())
	wd, err := watchdog.Attach(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Stop()

	gBefore, hBefore := settled()
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, together)
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i := range tenants {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := tenant(ctx, reg, srv.Addr, i); err != nil {
				fail(fmt.Errorf("tenant %d: %w", i, err))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 10)] {
		t.Error(err)
	}
	st := wd.Stats()
	if st.Renewals < tenants {
		t.Errorf("Stats().Renewals = %d after %d tenants held %d locks of %v for %v each, want at least %d: the lanes did not renew them",
			st.Renewals, tenants, locksEach, lockTTL, holdFor, tenants)
	}
	if st.Lost != 0 {
		t.Errorf("Stats().Lost = %d, want 0 (%+v)", st.Lost, st.Losses)
	}

	// The last lanes retire a second after their last lock; the clients
	// go with the next collections.
	var endpoints []string
	deadline := time.Now().Add(settleWithin)
	for {
		endpoints = endpoints[:0]
		for _, e := range wd.Stats().Endpoints {
			endpoints = append(endpoints, e.Endpoint)
		}
		if len(endpoints) == 0 && len(reg.Locks()) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(endpoints) != 0 {
		t.Errorf("Stats().Endpoints lists %d endpoints %v after every tenant closed its client, want none", len(endpoints), endpoints[:min(len(endpoints), 5)])
	}
	if n := len(reg.Locks()); n != 0 {
		t.Errorf("the registry tracks %d locks after every tenant released its locks, want none", n)
	}
	var gAfter int
	var hAfter uint64
	for {
		gAfter, hAfter = settled()
		if gAfter <= gBefore+goroutineSlack && hAfter <= hBefore+heapSlack || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d tenants: goroutines %d before, %d after; heap %.2f MiB before, %.2f MiB after; %d renewals",
		tenants, gBefore, gAfter, mib(hBefore), mib(hAfter), st.Renewals)
	if gAfter > gBefore+goroutineSlack {
		t.Errorf("%d goroutines after %d tenants came and went, %d before: want at most +%d", gAfter, tenants, gBefore, goroutineSlack)
	}
	if hAfter > hBefore+heapSlack {
		t.Errorf("heap %.2f MiB after %d tenants came and went, %.2f MiB before: want at most +%.0f MiB",
			mib(hAfter), tenants, mib(hBefore), mib(heapSlack))
	}
}

// tenant watches a client of its own, obtains locksEach locks through it,
// holds them for holdFor, releases them and closes the client.
func tenant(ctx context.Context, reg *registry.Registry, addr string, i int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	defer c.Close()
	if err := reg.Watch(c); err != nil {
		return err
	}
	locker := redislock.New(c)
	locks := make([]*redislock.Lock, 0, locksEach)
	for j := range locksEach {
		l, err := locker.Obtain(ctx, fmt.Sprintf("tenant:%d:job:%d", i, j), lockTTL, nil)
		if err != nil {
			return fmt.Errorf("obtain %d: %w", j, err)
		}
		locks = append(locks, l)
	}
	time.Sleep(holdFor)
	for j, l := range locks {
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("release %d after %v (TTL %v, renewed by the watchdog): %w", j, holdFor, lockTTL, err)
		}
	}
	return c.Close()
}

// settled returns the goroutine count and the live heap after two
// collections.
func settled() (int, uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
