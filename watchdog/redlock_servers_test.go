package watchdog

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
)

// RedlockServers starts n miniredis servers with TTLs on the test's clock,
// each reached through a client on in-memory connections that reg
// watches, and returns redsync pools over those clients and the servers;
// t.Cleanup closes them. Internal and external tests of a Redlock mutex
// share it.
func RedlockServers(t testing.TB, reg *registry.Registry, n int) ([]rsredis.Pool, []*miniredis.Miniredis) {
	t.Helper()
	var pools []rsredis.Pool
	var ms []*miniredis.Miniredis
	for range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		c := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: memconn.Dialer(m), MaxRetries: -1})
		if err := reg.Watch(c); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, rsgoredis.NewPool(c))
		ms = append(ms, m)
		t.Cleanup(func() { _ = c.Close(); m.Close() })
	}
	return pools, ms
}
