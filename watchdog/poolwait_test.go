package watchdog_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// A renew call that waited for a connection of the client's pool past
// PoolTimeout never left the client: the application holds the pool, and
// the endpoint has not failed. It is retried, and the endpoint is not
// reported down. Counted as down, one such call ended a sweep and handed
// every lock it had not sent to the schedule as a retry: 100,000 locks of
// 30 s on "@every 2s", PoolSize 4, PoolTimeout 1s, beside an open-loop
// application that kept the pool busy (go run ./cmd/lockwatch-bench
// -cases neighbour -neighbour-duration 60s), gave up 70,909 locks as
// unreachable while Redis answered every call that reached it.
//
// A client with a pool of one connection, PoolTimeout 100 ms, 200 locks
// of 3 s; the application holds the connection from 0.5 s to 2 s. Seen
// failing before the change: the endpoint down at 1.5 s.
//
// A lane without connections of its own for a full pool (spare.go), as a
// Sentinel failover client's, keeps waiting in the pool: SetNoSpare makes
// this one such a lane.
func TestPoolTimeoutIsNotEndpointDown(t *testing.T) {
	defer watchdog.SetNoSpare()()
	t.Cleanup(dropPoolTimers)
	watchdog.Bubble(t, func(t *testing.T) {
		e, wd, lost, conn := heldPool(t)
		defer wd.Stop()
		time.Sleep(time.Second)
		synctest.Wait()
		st := wd.Stats()
		if st.RenewErrors == 0 {
			t.Fatalf("no renew call failed while the application held the pool (the scenario did not happen); stats %+v", st)
		}
		if st.SpareCalls != 0 {
			t.Errorf("Stats().SpareCalls = %d on a lane that has no connections of its own, want 0", st.SpareCalls)
		}
		if len(st.Endpoints) != 1 || st.Endpoints[0].Down {
			t.Errorf("the endpoint is reported down while the application holds the client's pool (Redis answers); endpoints %+v", st.Endpoints)
		} else if err := st.Endpoints[0].LastError; err == nil || !strings.Contains(err.Error(), "pool timeout") {
			t.Errorf("the endpoint's LastError = %v, want the pool's timeout", err)
		}
		time.Sleep(500 * time.Millisecond)
		_ = conn.Close()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		keys, _ := lost.get()
		held := 0
		for i := range poolLocks {
			if e.pttl(fmt.Sprintf("p%03d", i)) > 0 {
				held++
			}
		}
		if len(keys) > 0 || held < poolLocks {
			t.Errorf("%d lost (%v), %d of %d held after the application gave its connection back, want none lost and all held; stats %+v", len(keys), head(keys, 3), held, poolLocks, wd.Stats())
		}
		for i := range poolLocks {
			e.releaseQuiet(fmt.Sprintf("p%03d", i), "me")
		}
	})
}

// The same application holding its pool of one, with the lanes as they
// are: once a renew call has waited past PoolTimeout, calls go on a
// connection of the watchdog's own while the pool has none free; no other
// call fails, and every lock is held throughout. Seen failing without the
// spare: every lock lost, 10 renew errors.
func TestFullPoolRenewsOnSpare(t *testing.T) {
	t.Cleanup(dropPoolTimers)
	watchdog.Bubble(t, func(t *testing.T) {
		e, wd, lost, conn := heldPool(t)
		defer wd.Stop()
		for range 8 { // 4 s, past the locks' TTL
			time.Sleep(500 * time.Millisecond)
			synctest.Wait()
			held := 0
			for i := range poolLocks {
				if e.pttl(fmt.Sprintf("p%03d", i)) > 0 {
					held++
				}
			}
			if held < poolLocks {
				t.Fatalf("%d of %d locks held while the application held the pool's only connection, want all; stats %+v", held, poolLocks, wd.Stats())
			}
		}
		_ = conn.Close()
		st := wd.Stats()
		if st.RenewErrors > 1 || st.SpareCalls == 0 {
			t.Errorf("renew errors %d, calls on the watchdog's own connections %d: want at most the first failed (the pool's timeout), the rest sent on its own; stats %+v", st.RenewErrors, st.SpareCalls, st)
		}
		if len(st.Endpoints) != 1 || st.Endpoints[0].SpareCalls != st.SpareCalls {
			t.Errorf("endpoints %+v: want one, with the watchdog's SpareCalls (%d)", st.Endpoints, st.SpareCalls)
		}
		if keys, _ := lost.get(); len(keys) > 0 {
			t.Errorf("%d lost (%v), want none", len(keys), head(keys, 3))
		}
		for i := range poolLocks {
			e.releaseQuiet(fmt.Sprintf("p%03d", i), "me")
		}
	})
}

// dropPoolTimers empties go-redis's package-wide pool of timers, which a
// command waiting for a full connection pool takes one from and gives
// back: a timer made in a synctest bubble and used again outside it, or
// in another bubble, is a fatal error ("select on synctest channel from
// outside bubble", seen when TestFullPoolRenewsOnSpare followed
// TestPoolTimeoutIsNotEndpointDown). Two collections empty a sync.Pool.
func dropPoolTimers() {
	runtime.GC()
	runtime.GC()
}

// heldPool is a client with a pool of one connection (PoolTimeout
// 100 ms), watched on "@every 1s", with 200 locks of 3 s obtained through
// it; 0.5 s later the application holds the pool's only connection
// (conn). Call it in a bubble; the caller stops the watchdog.
func heldPool(t *testing.T) (*env, *watchdog.Watchdog, *lossLog, *redis.Conn) {
	t.Helper()
	e := newEnvOptions(t, func(o *redis.Options) {
		o.PoolSize, o.PoolTimeout = 1, 100*time.Millisecond
	})
	lost := &lossLog{}
	wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"), watchdog.WithOnLost(lost.onLost))
	for i := range poolLocks {
		e.obtain(t, fmt.Sprintf("p%03d", i), "me", 3*time.Second)
	}
	time.Sleep(500 * time.Millisecond)
	conn := e.rdb.Conn() // the pool's only connection, once it has run a command
	if err := conn.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING on the held connection: %v", err)
	}
	return e, wd, lost, conn
}

// poolLocks is how many locks heldPool obtains.
const poolLocks = 200
