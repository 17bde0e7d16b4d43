package goredsync_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

func TestUpstream(t *testing.T) {
	ctx := adaptertest.Context(t)
	reg, rdb, m := adaptertest.Watched(t, goredsync.New())
	rs := redsync.New(goredis.NewPool(rdb))

	// The default expiry, 8s, goes out as SET ... EX 8 NX.
	mu := rs.NewMutex("job:1")
	if err := mu.LockContext(ctx); err != nil {
		t.Fatalf("Lock() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Lock", reg, adaptertest.Tracked("job:1", mu.Value(), "redsync", 8*time.Second))
	if ok, err := mu.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("Extend() = %v, %v, want true, nil", ok, err)
	}
	adaptertest.WantLocks(t, "Extend", reg, adaptertest.Tracked("job:1", mu.Value(), "redsync", 8*time.Second))

	// A sub-second expiry goes out as PX; extending with SET NX.
	nx := rs.NewMutex("job:2", redsync.WithExpiry(1500*time.Millisecond), redsync.WithSetNXOnExtend())
	if err := nx.LockContext(ctx); err != nil {
		t.Fatalf("Lock(WithSetNXOnExtend) = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Lock(WithSetNXOnExtend)", reg,
		adaptertest.Tracked("job:1", mu.Value(), "redsync", 8*time.Second),
		adaptertest.Tracked("job:2", nx.Value(), "redsync", 1500*time.Millisecond))
	if ok, err := nx.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("Extend(WithSetNXOnExtend) = %v, %v, want true, nil", ok, err)
	}
	adaptertest.WantLocks(t, "Extend(WithSetNXOnExtend)", reg,
		adaptertest.Tracked("job:1", mu.Value(), "redsync", 8*time.Second),
		adaptertest.Tracked("job:2", nx.Value(), "redsync", 1500*time.Millisecond))

	// Another mutex on job:1 fails to reach its quorum and releases its own
	// value: job:1 stays tracked with the holder's value.
	other := rs.NewMutex("job:1", redsync.WithTries(1))
	if err := other.LockContext(ctx); err == nil {
		t.Fatalf("Lock() of a held key = nil, want an error")
	}
	adaptertest.WantLocks(t, "a failed Lock", reg,
		adaptertest.Tracked("job:1", mu.Value(), "redsync", 8*time.Second),
		adaptertest.Tracked("job:2", nx.Value(), "redsync", 1500*time.Millisecond))

	if ok, err := mu.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("Unlock() = %v, %v, want true, nil", ok, err)
	}
	adaptertest.WantLocks(t, "Unlock", reg, adaptertest.Tracked("job:2", nx.Value(), "redsync", 1500*time.Millisecond))

	// job:2 vanished behind the holder's back: with WithSetNXOnExtend the
	// extend takes it again (answers 1) and the lock stays tracked.
	m.Del("job:2")
	if ok, err := nx.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("Extend(WithSetNXOnExtend) of a deleted key = %v, %v, want true, nil", ok, err)
	}
	adaptertest.WantLocks(t, "Extend(WithSetNXOnExtend) of a deleted key", reg, adaptertest.Tracked("job:2", nx.Value(), "redsync", 1500*time.Millisecond))

	// Taken by someone else: the extend answers 0 and the lock is untracked.
	m.Set("job:2", "someone else")
	if ok, _ := nx.ExtendContext(ctx); ok {
		t.Fatalf("Extend() of a key another holder took = true, want false")
	}
	adaptertest.WantLocks(t, "an extend that answered 0", reg)

	// An unlock that finds the key gone still untracks (nothing left here).
	if ok, _ := nx.UnlockContext(ctx); ok {
		t.Fatalf("Unlock() of a key another holder took = true, want false")
	}
	adaptertest.WantLocks(t, "an unlock that answered 0", reg)
}

// An extend without SET NX of a lock that expired answers 0: untracked.
func TestUpstreamExtendExpired(t *testing.T) {
	ctx := adaptertest.Context(t)
	reg, rdb, m := adaptertest.Watched(t, goredsync.New())
	mu := redsync.New(goredis.NewPool(rdb)).NewMutex("job:1", redsync.WithExpiry(time.Second))
	if err := mu.LockContext(ctx); err != nil {
		t.Fatalf("Lock() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Lock", reg, adaptertest.Tracked("job:1", mu.Value(), "redsync", time.Second))
	m.FastForward(2 * time.Second)
	if ok, err := mu.ExtendContext(ctx); ok || err == nil {
		t.Fatalf("Extend() of an expired lock = %v, %v, want false and an error", ok, err)
	}
	adaptertest.WantLocks(t, "an extend of an expired lock", reg)
}

// The application's own SET NX with an expiry, on the client redsync uses,
// is not a redsync lock.
func TestUpstreamApplicationSetNX(t *testing.T) {
	ctx := adaptertest.Context(t)
	reg, rdb, _ := adaptertest.Watched(t, goredsync.New())
	if ok, err := rdb.SetNX(ctx, "app:1", "v", time.Second).Result(); !ok || err != nil {
		t.Fatalf("SetNX() = %v, %v, want true, nil", ok, err)
	}
	if err := rdb.Do(ctx, "SET", "app:2", "v", "NX", "PX", 1000).Err(); err != nil {
		t.Fatalf("SET NX PX = %v, want nil", err)
	}
	if err := rdb.SetArgs(ctx, "app:3", "v", redis.SetArgs{Mode: "NX", TTL: 2 * time.Second}).Err(); err != nil {
		t.Fatalf("SetArgs(NX) = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "the application's own SET NX", reg)

	// Nor is a SET NX the application pipelines.
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, "app:4", "v", time.Second)
		return nil
	})
	if err != nil {
		t.Fatalf("Pipelined(SetNX) = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "the application's pipelined SET NX", reg)

	// A redsync lock on the same client is tracked next to them.
	mu := redsync.New(goredis.NewPool(rdb)).NewMutex("job:1")
	if err := mu.LockContext(ctx); err != nil {
		t.Fatalf("Lock() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Lock", reg, adaptertest.Tracked("job:1", mu.Value(), "redsync", 8*time.Second))
	if _, err := mu.UnlockContext(ctx); err != nil {
		t.Fatalf("Unlock() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Unlock", reg)
}

// With several pools, each client's table gets the lock it was set on.
func TestUpstreamQuorum(t *testing.T) {
	ctx := adaptertest.Context(t)
	reg := registry.New(goredsync.New())
	var pools []*redis.Client
	for range 3 {
		rdb := adaptertest.Client(t, miniredis.RunT(t))
		if err := reg.Watch(rdb); err != nil {
			t.Fatalf("Watch() = %v, want nil", err)
		}
		pools = append(pools, rdb)
	}
	// One node is already taken by someone else: 2 of 3 is still a quorum.
	if err := pools[2].Set(ctx, "job:1", "someone else", 0).Err(); err != nil {
		t.Fatalf("SET = %v, want nil", err)
	}
	mu := redsync.New(goredis.NewPool(pools[0]), goredis.NewPool(pools[1]), goredis.NewPool(pools[2])).
		NewMutex("job:1", redsync.WithTries(1))
	if err := mu.LockContext(ctx); err != nil {
		t.Fatalf("Lock() = %v, want nil", err)
	}
	for i, rdb := range pools {
		l, ok := reg.Get(rdb, "job:1")
		if want := i < 2; ok != want || (ok && l.Value != mu.Value()) {
			t.Errorf("after Lock: Get(node %d, job:1) = %+v, %v, want tracked %v with the mutex's value", i, l, ok, want)
		}
	}
	// The taken node answers 0 to the release; 2 of 3 is a quorum.
	if ok, err := mu.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("Unlock() = %v, %v, want true, nil", ok, err)
	}
	if n := reg.Len(); n != 0 {
		t.Errorf("after Unlock: Len() = %d, want 0", n)
	}
}
