package scripts_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// miniredis runs Lua on gopher-lua: the renew script is pre-loaded on a
// real redis-server too, where SCRIPT LOAD must report RenewSHA1.
func TestRenewScriptLoadOnRealServer(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	checkScriptLoad(t, rdb)
}
