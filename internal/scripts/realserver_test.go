package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// miniredis runs Lua on gopher-lua: the script's contract is checked on a
// real redis-server too (SCRIPT LOAD of its source, in package
// github.com/lockwatch/lockwatch/scripts).
func TestRenewOnRealServer(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	checkRenew(t, rdb, true, func(key string) time.Duration { return rdb.PTTL(ctx, key).Val() })
}
