package scripts_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/scripts"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// miniredis runs Lua on gopher-lua: the script's contract is checked on a
// real redis-server too (SCRIPT LOAD of its source, in package
// github.com/lockwatch/lockwatch/scripts).
func TestRenewOnRealServer(t *testing.T) {
	srv := testredis.Start(t)
	rdb := client(t, &redis.Options{Addr: srv.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	checkRenew(t, rdb, true, func(key string) time.Duration { return rdb.PTTL(ctx, key).Val() })
	// On Redis 7 every renewal above was a PEXPIREAT: Redis rewrites a
	// PEXPIRE into one for its replicas and AOF, at a cost the script
	// spares it.
	if at, plain := calls(t, rdb, "pexpireat"), calls(t, rdb, "pexpire"); at == 0 || plain != 0 {
		t.Errorf("the server ran PEXPIREAT %d times and PEXPIRE %d times, want PEXPIREAT only", at, plain)
	}
}

// TestRenewWithoutTime: on a server whose TIME command is renamed away,
// the script renews with PEXPIRE ... GT instead of failing every call.
func TestRenewWithoutTime(t *testing.T) {
	srv := testredis.StartWith(t, testredis.Options{Config: "rename-command TIME \"\"\n"})
	rdb := client(t, &redis.Options{Addr: srv.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Do(ctx, "TIME").Err(); err == nil {
		t.Fatal("TIME answered: the server was not started without it")
	}
	checkRenew(t, rdb, true, func(key string) time.Duration { return rdb.PTTL(ctx, key).Val() })
	if at, plain := calls(t, rdb, "pexpireat"), calls(t, rdb, "pexpire"); at != 0 || plain == 0 {
		t.Errorf("the server ran PEXPIREAT %d times and PEXPIRE %d times, want PEXPIRE only", at, plain)
	}
	if err := rdb.Set(ctx, "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := renew(ctx, rdb, []string{"k"}, scripts.ModeShared, "v", 1000)
	if err != nil || len(res) != 1 || res[0] != scripts.Renewed {
		t.Errorf("Renew(k) = %v, %v, want [1]", res, err)
	}
}

// TestRenewUnderACLWithoutPexpireat: a user whose ACL admits PEXPIRE but
// not PEXPIREAT (written for the commands a renewal used to run) still
// renews: the first key of each call finds PEXPIREAT refused, and the
// script uses PEXPIRE ... GT.
func TestRenewUnderACLWithoutPexpireat(t *testing.T) {
	srv := testredis.Start(t)
	admin := client(t, &redis.Options{Addr: srv.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Do(ctx, "ACL", "SETUSER", "renewer", "on", ">pw", "~*", "+@all", "-pexpireat").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := client(t, &redis.Options{Addr: srv.Addr, Username: "renewer", Password: "pw"})
	if err := rdb.Do(ctx, "PEXPIREAT", "nokey", 1).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("PEXPIREAT as renewer = %v, want NOPERM", err)
	}
	checkRenew(t, rdb, true, func(key string) time.Duration { return rdb.PTTL(ctx, key).Val() })
	if at, plain := calls(t, admin, "pexpireat"), calls(t, admin, "pexpire"); at != 0 || plain == 0 {
		t.Errorf("the server ran PEXPIREAT %d times and PEXPIRE %d times, want PEXPIRE only", at, plain)
	}
}

// client returns a client of o, closed when t ends.
func client(t *testing.T, o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// calls returns how many times the server behind rdb ran cmd (lower case),
// scripts' calls included.
func calls(t *testing.T, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
