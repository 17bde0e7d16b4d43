package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/scripts"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// miniredis runs Lua on gopher-lua: the script's contract and its pinned
// hash are checked on a real redis-server too.
func TestRenewOnRealServer(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sha, err := rdb.ScriptLoad(ctx, scripts.RenewSource()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if sha != scripts.RenewSHA1 {
		t.Fatalf("SCRIPT LOAD renew.lua = %s, want pinned %s", sha, scripts.RenewSHA1)
	}
	checkRenew(t, rdb, true, func(key string) time.Duration { return rdb.PTTL(ctx, key).Val() })
}
