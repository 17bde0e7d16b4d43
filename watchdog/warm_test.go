package watchdog_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// A lane has its endpoint's pool hold the connections its calls and a
// hedge's need before they need them (issue 26 item 4): at GOMAXPROCS=1
// beside spinning goroutines (TestStarvedHolder) the pool dialled its
// second connection only when two renew calls were first in flight; the
// dial and go-redis's greeting took several of the starved process's
// turns, and that call's 100 locks of 300 ms expired together.
//
// Here every new connection takes 250 ms to greet the server. A client
// with one connection first holds 10 locks of 300 ms: one call carries
// them, and the lane dials nothing more (issue 21's budget: a watched
// client costs at most one connection). Then 100 locks of 2 s: a call's
// worth, the lane warms the pool. Then 200 locks of 300 ms: two full
// calls go out at once when they fall due, and none may be lost. Without
// the warm pool (seen failing) the second call waited for its connection
// and its locks were lost (75 of 200).
func TestLaneWarmsItsPool(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		defer m.Close()
		// Every new connection's greeting takes greetTook, once set: a
		// process starved of CPU takes several of its turns to dial and
		// greet a server. (The delay is in the connection's first write,
		// not in the dial: go-redis v9.4 dials one connection at a time,
		// under a mutex, which a synctest bubble cannot wait through.)
		var greetTook atomic.Int64
		dial := memconn.Dialer(m)
		rdb := redis.NewClient(&redis.Options{Addr: memconn.Addr, MaxRetries: -1,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &slowGreeting{Conn: c, d: time.Duration(greetTook.Load())}, nil
			}})
		defer rdb.Close()
		reg := registry.New(setAdapter{})
		if err := reg.Watch(rdb); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		greetTook.Store(int64(250 * time.Millisecond))
		lost := &lossLog{}
		wd := attach(t, reg, watchdog.WithOnLost(lost.onLost))
		defer wd.Stop()
		obtain := func(prefix string, n int, ttl time.Duration) {
			for i := range n {
				key := fmt.Sprintf("%s:%03d", prefix, i)
				if ok, err := rdb.SetNX(ctx, key, "me", ttl).Result(); !ok || err != nil {
					t.Fatalf("SET %s NX = %v, %v, want true, nil", key, ok, err)
				}
			}
		}
		obtain("few", 10, 300*time.Millisecond)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := rdb.PoolStats(); st.TotalConns != 1 {
			t.Fatalf("2 s into 10 locks of 300 ms: pool %+v, want the one connection the client had", st)
		}
		obtain("more", 100, 2*time.Second)
		time.Sleep(2 * time.Second) // the lane warms its pool
		synctest.Wait()
		// The lane asks for WarmConns; on an in-memory server a PING may
		// take a connection another PING has just put back, so the pool
		// may hold fewer: at least two calls' worth and the application's.
		if st := rdb.PoolStats(); st.TotalConns < 3 || st.IdleConns != st.TotalConns {
			t.Fatalf("2 s after the client held a call's worth of locks: pool %+v, want 3 connections at least (%d asked for), all idle", st, min(watchdog.WarmConns, rdb.Options().PoolSize/2))
		}

		const n = 200
		obtain("short", n, 300*time.Millisecond)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if keys, _ := lost.get(); len(keys) > 0 {
			t.Errorf("%d locks lost (first %v); stats %+v", len(keys), keys[0], wd.Stats())
		}
	})
}

// slowGreeting is a connection whose first write (go-redis's greeting)
// takes d.
type slowGreeting struct {
	net.Conn
	d    time.Duration
	once sync.Once
}

func (c *slowGreeting) Write(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.d) })
	return c.Conn.Write(b)
}
