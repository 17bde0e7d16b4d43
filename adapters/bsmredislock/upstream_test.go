package bsmredislock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// upstream is a registry with the redislock adapter watching a client of a
// fresh server, and a record of the lock commands the client sent.
type upstream struct {
	a       *bsmredislock.Adapter
	reg     *registry.Registry
	rdb     *redis.Client
	capture *adaptertest.Capture
}

// onServers runs test on miniredis (whose Lua is gopher-lua) and on a real
// redis-server (skipped without one, see testredis.Start).
func onServers(t *testing.T, test func(t *testing.T, u upstream)) {
	t.Run("miniredis", func(t *testing.T) {
		a := bsmredislock.New()
		reg, rdb, _ := adaptertest.Watched(t, a)
		capture := &adaptertest.Capture{}
		rdb.AddHook(capture)
		test(t, upstream{a, reg, rdb, capture})
	})
	t.Run("redis-server", func(t *testing.T) {
		srv := testredis.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		a := bsmredislock.New()
		reg := registry.New(a)
		if err := reg.Watch(rdb); err != nil {
			t.Fatalf("Watch() = %v, want nil", err)
		}
		capture := &adaptertest.Capture{}
		rdb.AddHook(capture)
		test(t, upstream{a, reg, rdb, capture})
	})
}

// get returns key's value, "" when it does not exist.
func (u upstream) get(t *testing.T, key string) string {
	t.Helper()
	v, err := u.rdb.Get(context.Background(), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s = %v", key, err)
	}
	return v
}

// del deletes key behind the lock holder's back.
func (u upstream) del(t *testing.T, key string) {
	t.Helper()
	if err := u.rdb.Del(context.Background(), key).Err(); err != nil {
		t.Fatalf("DEL %s = %v", key, err)
	}
}

// wantTTL fails t unless key's remaining TTL is at most ttl and more than
// ttl less a second.
func (u upstream) wantTTL(t *testing.T, step, key string, ttl time.Duration) {
	t.Helper()
	got, err := u.rdb.PTTL(context.Background(), key).Result()
	if err != nil || got > ttl || got <= ttl-time.Second {
		t.Errorf("after %s: PTTL %s = %v, %v, want about %v", step, key, got, err, ttl)
	}
}

// lastCommand returns what the adapter makes of the last command recorded
// since the last call, answered and asked before it was sent (pending), and
// fails t when none was recorded.
func (u upstream) lastCommand(t *testing.T) (answered, pending registry.Action) {
	t.Helper()
	sent := u.capture.Take()
	if len(sent) == 0 {
		t.Fatalf("redislock sent no EVAL or EVALSHA")
	}
	c := sent[len(sent)-1]
	name, _ := c.Args[0].(string)
	name = strings.ToLower(name)
	answered = u.a.Classify(registry.Command{Name: name, Args: c.Args, Reply: c.Reply, Err: c.Err})
	pending = u.a.Classify(registry.Command{Name: name, Args: c.Args, Pending: true})
	return answered, pending
}

// wantCommand fails t unless the last command recorded classifies as want,
// and as pendingWant before it was sent; step names what the test did last.
func (u upstream) wantCommand(t *testing.T, step string, want, pendingWant registry.Action) {
	t.Helper()
	got, pending := u.lastCommand(t)
	if !adapterkit.SameAction(got, want) {
		t.Errorf("%s: Classify() = %+v, want %+v", step, got, want)
	}
	if !adapterkit.SameAction(pending, pendingWant) {
		t.Errorf("%s: Classify(pending) = %+v, want %+v", step, pending, pendingWant)
	}
}

// TestUpstream runs the linked redislock (v0.9.4 or v0.10.0) against a
// watched client, and checks what the registry tracks and, for the obtain,
// refresh and release, what the adapter makes of the last command sent,
// before it was sent too.
func TestUpstream(t *testing.T) { onServers(t, testUpstream) }

func testUpstream(t *testing.T, u upstream) {
	ctx := adaptertest.Context(t)
	reg := u.reg
	client := redislock.New(u.rdb)
	action := func(op registry.Op, key, value string, ttl time.Duration) registry.Action {
		return registry.Action{Op: op, Key: key, Value: value, TTL: ttl}
	}

	lock, err := client.Obtain(ctx, "job:1", 10*time.Second, nil)
	if err != nil {
		t.Fatalf("Obtain() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Obtain", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 10*time.Second))
	obtained := action(registry.OpObtain, "job:1", lock.Token(), 10*time.Second)
	u.wantCommand(t, "Obtain", obtained, obtained)

	// Another holder's attempt fails and changes nothing.
	if _, err := client.Obtain(ctx, "job:1", time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("second Obtain() = %v, want ErrNotObtained", err)
	}
	adaptertest.WantLocks(t, "a failed Obtain", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 10*time.Second))
	if got, _ := u.lastCommand(t); got.Op != registry.OpNone {
		t.Errorf("a failed Obtain: Classify() = %+v, want OpNone", got)
	}

	if err := lock.Refresh(ctx, 30*time.Second, nil); err != nil {
		t.Fatalf("Refresh() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Refresh", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 30*time.Second))
	refreshed := action(registry.OpRefresh, "job:1", lock.Token(), 30*time.Second)
	u.wantCommand(t, "Refresh", refreshed, refreshed)
	u.wantTTL(t, "Refresh", "job:1", 30*time.Second)

	if _, err := lock.TTL(ctx); err != nil {
		t.Fatalf("TTL() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "TTL", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 30*time.Second))

	// A custom token with metadata, then a re-obtain with new metadata.
	opt := &redislock.Options{Token: "tok-42", Metadata: "worker=a"}
	if _, err := client.Obtain(ctx, "job:2", 5*time.Second, opt); err != nil {
		t.Fatalf("Obtain(custom token) = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Obtain(custom token)", reg,
		adaptertest.Tracked("job:1", lock.Token(), "redislock", 30*time.Second),
		adaptertest.Tracked("job:2", "tok-42worker=a", "redislock", 5*time.Second))
	opt.Metadata = "worker=b"
	custom, err := client.Obtain(ctx, "job:2", 7*time.Second, opt)
	if err != nil {
		t.Fatalf("re-Obtain(custom token) = %v, want nil", err)
	}
	if got := u.get(t, "job:2"); got != "tok-42worker=b" {
		t.Fatalf("after re-Obtain: GET job:2 = %q, want %q", got, "tok-42worker=b")
	}
	adaptertest.WantLocks(t, "re-Obtain(custom token)", reg,
		adaptertest.Tracked("job:1", lock.Token(), "redislock", 30*time.Second),
		adaptertest.Tracked("job:2", "tok-42worker=b", "redislock", 7*time.Second))
	reobtained := action(registry.OpObtain, "job:2", "tok-42worker=b", 7*time.Second)
	u.wantCommand(t, "re-Obtain(custom token)", reobtained, reobtained)

	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Release", reg, adaptertest.Tracked("job:2", "tok-42worker=b", "redislock", 7*time.Second))
	released := action(registry.OpRelease, "job:1", lock.Token(), 0)
	u.wantCommand(t, "Release", released, released)

	// The lock vanished behind the holder's back: its refresh answers 0
	// (v0.9.4) or nil (v0.10.0).
	u.del(t, "job:2")
	if err := custom.Refresh(ctx, 7*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Refresh() of a deleted lock = %v, want ErrNotObtained", err)
	}
	adaptertest.WantLocks(t, "a refresh that answered 0", reg)
	u.wantCommand(t, "Refresh of a deleted lock",
		action(registry.OpNotHeld, "job:2", "tok-42worker=b", 0), action(registry.OpRefresh, "job:2", "tok-42worker=b", 7*time.Second))

	// A release of a lock that is no longer held still untracks nothing else.
	if err := custom.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("Release() of a deleted lock = %v, want ErrLockNotHeld", err)
	}
	adaptertest.WantLocks(t, "a release that answered 0", reg)
	notHeld := action(registry.OpRelease, "job:2", "tok-42worker=b", 0)
	u.wantCommand(t, "Release of a deleted lock", notHeld, notHeld)
}

// multiObtainer is redislock v0.10.0's ObtainMulti.
type multiObtainer interface {
	ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error)
}

// TestUpstreamMulti runs the linked redislock's ObtainMulti (v0.10.0), and
// the refresh, TTL and release of its lock over several keys, against a
// watched client, and checks what the adapter makes of each command (every
// key in Keys) and what the registry tracks (the lock, by its first key).
func TestUpstreamMulti(t *testing.T) {
	if _, ok := any(redislock.New(nil)).(multiObtainer); !ok {
		t.Skip("linked redislock v0.9.4 has no ObtainMulti")
	}
	onServers(t, testUpstreamMulti)
}

func testUpstreamMulti(t *testing.T, u upstream) {
	ctx := adaptertest.Context(t)
	reg := u.reg
	multi := any(redislock.New(u.rdb)).(multiObtainer)
	keys := []string{"job:{1}a", "job:{1}b", "job:{1}c"}
	action := func(op registry.Op, value string, ttl time.Duration) registry.Action {
		return registry.Action{Op: op, Key: keys[0], Keys: slices.Clone(keys), Value: value, TTL: ttl}
	}

	lock, err := multi.ObtainMulti(ctx, keys, 10*time.Second, &redislock.Options{Metadata: "worker=a"})
	if err != nil {
		t.Fatalf("ObtainMulti() = %v, want nil", err)
	}
	value := lock.Token() + "worker=a"
	obtained := action(registry.OpObtain, value, 10*time.Second)
	u.wantCommand(t, "ObtainMulti", obtained, obtained)
	adaptertest.WantLocks(t, "ObtainMulti", reg, adaptertest.Tracked(keys[0], value, "redislock", 10*time.Second))
	for _, k := range keys {
		if got := u.get(t, k); got != value {
			t.Errorf("after ObtainMulti: %s = %q, want %q", k, got, value)
		}
		u.wantTTL(t, "ObtainMulti", k, 10*time.Second)
	}

	// A lock over a key of it is not obtained, and takes no other key.
	if _, err := multi.ObtainMulti(ctx, []string{"job:{1}d", keys[2]}, time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("ObtainMulti(a held key) = %v, want ErrNotObtained", err)
	}
	if got, _ := u.lastCommand(t); got.Op != registry.OpNone {
		t.Errorf("ObtainMulti(a held key): Classify() = %+v, want OpNone", got)
	}
	if got := u.get(t, "job:{1}d"); got != "" {
		t.Errorf("a failed ObtainMulti set job:{1}d to %q", got)
	}
	adaptertest.WantLocks(t, "a failed ObtainMulti", reg, adaptertest.Tracked(keys[0], value, "redislock", 10*time.Second))

	if err := lock.Refresh(ctx, 30*time.Second, nil); err != nil {
		t.Fatalf("Refresh() = %v, want nil", err)
	}
	refreshed := action(registry.OpRefresh, value, 30*time.Second)
	u.wantCommand(t, "Refresh", refreshed, refreshed)
	adaptertest.WantLocks(t, "Refresh", reg, adaptertest.Tracked(keys[0], value, "redislock", 30*time.Second))
	for _, k := range keys {
		u.wantTTL(t, "Refresh", k, 30*time.Second)
	}

	if ttl, err := lock.TTL(ctx); err != nil || ttl > 30*time.Second || ttl <= 29*time.Second {
		t.Fatalf("TTL() = %v, %v, want about 30s, nil", ttl, err)
	}
	if got, pending := u.lastCommand(t); got.Op != registry.OpNone || pending.Op != registry.OpNone {
		t.Errorf("TTL: Classify() = %+v, pending %+v, want OpNone", got, pending)
	}

	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	released := action(registry.OpRelease, value, 0)
	u.wantCommand(t, "Release", released, released)
	adaptertest.WantLocks(t, "Release", reg)
	for _, k := range keys {
		if got := u.get(t, k); got != "" {
			t.Errorf("after Release: %s = %q, want no key", k, got)
		}
	}

	// One key of the lock vanished behind the holder's back: the lock is
	// not held, its refresh answers nil and changes nothing, at once
	// whatever the retry strategy.
	if lock, err = multi.ObtainMulti(ctx, keys, 10*time.Second, nil); err != nil {
		t.Fatalf("ObtainMulti() again = %v, want nil", err)
	}
	u.capture.Take()
	value = lock.Token()
	u.del(t, keys[1])
	if err := lock.Refresh(ctx, 20*time.Second, &redislock.Options{
		RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 3),
	}); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Refresh() of a partly deleted lock = %v, want ErrNotObtained", err)
	}
	u.wantCommand(t, "Refresh of a partly deleted lock",
		action(registry.OpNotHeld, value, 0), action(registry.OpRefresh, value, 20*time.Second))
	adaptertest.WantLocks(t, "a refresh that answered nil", reg)
	u.wantTTL(t, "a refresh that answered nil", keys[0], 10*time.Second)

	if err := lock.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("Release() of a partly deleted lock = %v, want ErrLockNotHeld", err)
	}
	u.wantCommand(t, "Release of a partly deleted lock", action(registry.OpRelease, value, 0), action(registry.OpRelease, value, 0))
	if got := u.get(t, keys[0]); got != value {
		t.Errorf("a Release that answered nil: %s = %q, want %q", keys[0], got, value)
	}
}

// The application's own commands that look like lock commands are not
// tracked by the redislock adapter.
func TestUpstreamApplicationCommands(t *testing.T) {
	ctx := adaptertest.Context(t)
	reg, rdb, _ := adaptertest.Watched(t, bsmredislock.New())
	if err := rdb.SetNX(ctx, "app:1", "v", time.Second).Err(); err != nil {
		t.Fatalf("SetNX() = %v, want nil", err)
	}
	if err := rdb.Do(ctx, "SET", "app:2", "v", "NX", "PX", 1000).Err(); err != nil {
		t.Fatalf("SET NX PX = %v, want nil", err)
	}
	if err := rdb.Eval(ctx, `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3])`, []string{"app:3"}, "v", 1, "1000").Err(); err != nil {
		t.Fatalf("EVAL = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "the application's own commands", reg)
}
