package isolation_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// TestPoolHeldByApplication: the application holds every connection of
// its client's pool with blocking commands (BLPOP on an empty list, as a
// queue's workers do) while locks obtained through that client are
// tracked. Redis answers at once; only the client's pool is busy. Each
// lock must be kept on the server, none reported to OnLost, and no
// holder told its lock may be lost; Stats().SpareCalls counts the calls
// sent on the watchdog's own connections.
//
// Before the watchdog had connections of its own for a full pool, every
// renew call waited in the pool's queue behind the BLPOPs (up to their
// 2 s timeout) and the locks of 1 s expired: seen failing, 20 of 20 keys
// gone. The Ring form holds the pool of a Ring's only shard: its lane
// copies the shard client's options for its own connections.
func TestPoolHeldByApplication(t *testing.T) {
	harness.SkipShort(t, "holds a pool for seconds")
	const pool = 4
	for _, tc := range []struct {
		name string
		app  func(addr string) redis.UniversalClient
	}{
		{"client", func(addr string) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool, PoolTimeout: 4 * time.Second})
		}},
		{"ring", func(addr string) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"only": addr}, PoolSize: pool, PoolTimeout: 4 * time.Second})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { poolHeld(t, tc.app, pool) })
	}
}

// poolHeld runs TestPoolHeldByApplication with the client newClient makes,
// whose pool (or each shard's) holds pool connections.
func poolHeld(t *testing.T, newClient func(addr string) redis.UniversalClient, pool int) {
	const (
		ttl   = time.Second
		n     = 20
		block = 2 * time.Second
		hold  = 5 * time.Second
	)
	srv := testredis.Start(t)
	app := newClient(srv.Addr)
	t.Cleanup(func() { _ = app.Close() })
	a := newApp(t, []redis.UniversalClient{app}, appConfig{})
	node := "server " + srv.Addr
	var held []*harness.Held
	for i := range n {
		key := fmt.Sprintf("iso:poolheld:%d", i)
		if i%4 == 3 {
			held = append(held, obtainRedsync(t, []redis.UniversalClient{app}, key, ttl, node))
		} else {
			held = append(held, obtainRedislock(t, app, key, ttl, node))
		}
	}
	t.Cleanup(func() { harness.ReleaseQuietly(held...) })
	spy := newServerSpy(t, srv.Addr)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), hold)
	defer cancel()
	var wg sync.WaitGroup
	var blocked, failed atomic.Int64
	for w := range pool {
		wg.Add(1)
		go func() {
			defer wg.Done()
			list := fmt.Sprintf("iso:poolheld:queue:%d", w)
			for ctx.Err() == nil {
				err := app.BLPop(ctx, block, list).Err()
				switch {
				case errors.Is(err, redis.Nil):
					blocked.Add(1) // waited the whole block: the connection was held
				case err != nil && ctx.Err() == nil:
					failed.Add(1)
				}
			}
		}()
	}
	mon := newMonitor(spy, start, held)
	var full, looks int
	for time.Since(start) < hold {
		mon.sampleOnce()
		if st := app.PoolStats(); int(st.TotalConns)-int(st.IdleConns) >= pool {
			full++
		}
		looks++
		time.Sleep(sample)
	}
	cancel()
	wg.Wait()
	if blocked.Load() < int64(pool) || full < looks/2 {
		t.Fatalf("the application did not hold the pool (BLPOPs that waited their whole %v: %d; pool full at %d of %d looks): the scenario did not happen", block, blocked.Load(), full, looks)
	}
	if failed.Load() > 0 {
		t.Errorf("%d of the application's BLPOPs failed", failed.Load())
	}
	lost := mon.lostOnServer(held)
	reports := a.Lost.Where(func(harness.LostEvent) bool { return true })
	if told := a.WD.Stats().Unconfirmed; len(lost) > 0 || told > 0 || len(reports) > 0 {
		a.Lag.NotJudged(t, ttl, start, time.Now(), "%d of %d locks expired, %d holders told their lock may be lost (%s)", len(lost), n, told, lostSummary(a.Lost))
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d locks of %v expired while the application held its client's pool of %d with BLPOPs (Redis answering), want none; %s; %s:%s",
			len(lost), n, ttl, pool, a.Lag.Note(time.Since(start)), lostSummary(a.Lost), mon.describe(lost, a.Lost, 10))
	}
	if len(reports) > 0 {
		t.Errorf("OnLost called %d times, want none: %s", len(reports), lostSummary(a.Lost))
	}
	if st := a.WD.Stats(); st.Unconfirmed > 0 {
		t.Errorf("%d holders told their lock may be lost, want none (Redis answered every call that reached it); %s", st.Unconfirmed, a.Lag.Note(time.Since(start)))
	}
	if st := a.WD.Stats(); st.SpareCalls == 0 {
		t.Errorf("Stats().SpareCalls = 0 while the application held the pool, want the renewals counted on the watchdog's own connections; stats %+v", st)
	}
	if !t.Failed() {
		t.Logf("%d locks of %v kept while %d BLPOPs of %v held the pool (full at %d of %d looks); least PTTL %v", n, ttl, blocked.Load(), block, full, looks, mon.leastOf(held))
	}
}
