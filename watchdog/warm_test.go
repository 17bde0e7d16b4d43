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
// Here every new connection takes 250 ms to greet the server; 200 locks of 300 ms are obtained over a
// client that has one connection, after the lane began with a lock of a
// minute: two full calls go out at once when they fall due, and none may
// be lost. Without the warm pool (seen failing) the second call waited
// for its connection and its locks were lost.
func TestLaneWarmsItsPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		if ok, err := rdb.SetNX(ctx, "long", "me", time.Minute).Result(); !ok || err != nil {
			t.Fatalf("SET long NX = %v, %v, want true, nil", ok, err)
		}
		time.Sleep(2 * time.Second) // the lane began with the first lock, and warmed its pool
		synctest.Wait()
		want := uint32(min(watchdog.WarmConns, rdb.Options().PoolSize/2))
		if st := rdb.PoolStats(); st.TotalConns < want || st.IdleConns != st.TotalConns {
			t.Fatalf("2 s after the lane began: pool %+v, want %d connections at least, all idle", st, want)
		}

		const n = 200
		for i := range n {
			key := fmt.Sprintf("short:%03d", i)
			if ok, err := rdb.SetNX(ctx, key, "me", 300*time.Millisecond).Result(); !ok || err != nil {
				t.Fatalf("SET %s NX = %v, %v, want true, nil", key, ok, err)
			}
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if keys, _ := lost.get(); len(keys) > 0 {
			t.Errorf("%d of %d locks of 300 ms lost (first %v); stats %+v", len(keys), n, keys[0], wd.Stats())
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
