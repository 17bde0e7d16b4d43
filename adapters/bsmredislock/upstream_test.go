package bsmredislock_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// watched returns a registry with the redislock adapter watching a client
// of a fresh miniredis, and the server.
func watched(t testing.TB) (*registry.Registry, *redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(context.Context, string, string) (net.Conn, error) { return m.Dial() },
	})
	t.Cleanup(func() { _ = rdb.Close() })
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("Watch() = %v, want nil", err)
	}
	return reg, rdb, m
}

// tracked is the part of a registry.Lock the adapter decides.
type tracked struct {
	Key, Value, Source string
	TTL                time.Duration
}

func locks(reg *registry.Registry) []tracked {
	var out []tracked
	for _, l := range reg.Locks() {
		out = append(out, tracked{Key: l.Key, Value: l.Value, Source: l.Source, TTL: l.TTL})
	}
	return out
}

func wantLocks(t testing.TB, step string, reg *registry.Registry, want ...tracked) {
	t.Helper()
	got := locks(reg)
	if len(got) != len(want) {
		t.Fatalf("after %s: Locks() = %+v, want %+v", step, got, want)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Fatalf("after %s: Locks() = %+v, want %+v", step, got, want)
		}
	}
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestUpstream(t *testing.T) {
	ctx := testContext(t)
	reg, rdb, m := watched(t)
	client := redislock.New(rdb)

	lock, err := client.Obtain(ctx, "job:1", 10*time.Second, nil)
	if err != nil {
		t.Fatalf("Obtain() = %v, want nil", err)
	}
	wantLocks(t, "Obtain", reg, tracked{"job:1", lock.Token(), "redislock", 10 * time.Second})

	// Another holder's attempt fails and changes nothing.
	if _, err := client.Obtain(ctx, "job:1", time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("second Obtain() = %v, want ErrNotObtained", err)
	}
	wantLocks(t, "a failed Obtain", reg, tracked{"job:1", lock.Token(), "redislock", 10 * time.Second})

	if err := lock.Refresh(ctx, 30*time.Second, nil); err != nil {
		t.Fatalf("Refresh() = %v, want nil", err)
	}
	wantLocks(t, "Refresh", reg, tracked{"job:1", lock.Token(), "redislock", 30 * time.Second})

	if _, err := lock.TTL(ctx); err != nil {
		t.Fatalf("TTL() = %v, want nil", err)
	}
	wantLocks(t, "TTL", reg, tracked{"job:1", lock.Token(), "redislock", 30 * time.Second})

	// A custom token with metadata, then a re-obtain with new metadata.
	opt := &redislock.Options{Token: "tok-42", Metadata: "worker=a"}
	custom, err := client.Obtain(ctx, "job:2", 5*time.Second, opt)
	if err != nil {
		t.Fatalf("Obtain(custom token) = %v, want nil", err)
	}
	wantLocks(t, "Obtain(custom token)", reg,
		tracked{"job:1", lock.Token(), "redislock", 30 * time.Second},
		tracked{"job:2", "tok-42worker=a", "redislock", 5 * time.Second})
	opt.Metadata = "worker=b"
	if custom, err = client.Obtain(ctx, "job:2", 7*time.Second, opt); err != nil {
		t.Fatalf("re-Obtain(custom token) = %v, want nil", err)
	}
	if got, _ := m.Get("job:2"); got != "tok-42worker=b" {
		t.Fatalf("after re-Obtain: GET job:2 = %q, want %q", got, "tok-42worker=b")
	}
	wantLocks(t, "re-Obtain(custom token)", reg,
		tracked{"job:1", lock.Token(), "redislock", 30 * time.Second},
		tracked{"job:2", "tok-42worker=b", "redislock", 7 * time.Second})

	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	wantLocks(t, "Release", reg, tracked{"job:2", "tok-42worker=b", "redislock", 7 * time.Second})

	// The lock vanished behind the holder's back: its refresh answers 0.
	m.Del("job:2")
	if err := custom.Refresh(ctx, 7*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Refresh() of a deleted lock = %v, want ErrNotObtained", err)
	}
	wantLocks(t, "a refresh that answered 0", reg)

	// A release of a lock that is no longer held still untracks nothing else.
	if err := custom.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("Release() of a deleted lock = %v, want ErrLockNotHeld", err)
	}
	wantLocks(t, "a release that answered 0", reg)
}

// The application's own commands that look like lock commands are not
// tracked by the redislock adapter.
func TestUpstreamApplicationCommands(t *testing.T) {
	ctx := testContext(t)
	reg, rdb, _ := watched(t)
	if err := rdb.SetNX(ctx, "app:1", "v", time.Second).Err(); err != nil {
		t.Fatalf("SetNX() = %v, want nil", err)
	}
	if err := rdb.Do(ctx, "SET", "app:2", "v", "NX", "PX", 1000).Err(); err != nil {
		t.Fatalf("SET NX PX = %v, want nil", err)
	}
	if err := rdb.Eval(ctx, `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3])`, []string{"app:3"}, "v", 1, "1000").Err(); err != nil {
		t.Fatalf("EVAL = %v, want nil", err)
	}
	wantLocks(t, "the application's own commands", reg)
}
