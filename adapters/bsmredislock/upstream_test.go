package bsmredislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
)

func TestUpstream(t *testing.T) {
	ctx := adaptertest.Context(t)
	reg, rdb, m := adaptertest.Watched(t, bsmredislock.New())
	client := redislock.New(rdb)

	lock, err := client.Obtain(ctx, "job:1", 10*time.Second, nil)
	if err != nil {
		t.Fatalf("Obtain() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Obtain", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 10*time.Second))

	// Another holder's attempt fails and changes nothing.
	if _, err := client.Obtain(ctx, "job:1", time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("second Obtain() = %v, want ErrNotObtained", err)
	}
	adaptertest.WantLocks(t, "a failed Obtain", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 10*time.Second))

	if err := lock.Refresh(ctx, 30*time.Second, nil); err != nil {
		t.Fatalf("Refresh() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Refresh", reg, adaptertest.Tracked("job:1", lock.Token(), "redislock", 30*time.Second))

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
	if got, _ := m.Get("job:2"); got != "tok-42worker=b" {
		t.Fatalf("after re-Obtain: GET job:2 = %q, want %q", got, "tok-42worker=b")
	}
	adaptertest.WantLocks(t, "re-Obtain(custom token)", reg,
		adaptertest.Tracked("job:1", lock.Token(), "redislock", 30*time.Second),
		adaptertest.Tracked("job:2", "tok-42worker=b", "redislock", 7*time.Second))

	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	adaptertest.WantLocks(t, "Release", reg, adaptertest.Tracked("job:2", "tok-42worker=b", "redislock", 7*time.Second))

	// The lock vanished behind the holder's back: its refresh answers 0.
	m.Del("job:2")
	if err := custom.Refresh(ctx, 7*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Refresh() of a deleted lock = %v, want ErrNotObtained", err)
	}
	adaptertest.WantLocks(t, "a refresh that answered 0", reg)

	// A release of a lock that is no longer held still untracks nothing else.
	if err := custom.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("Release() of a deleted lock = %v, want ErrLockNotHeld", err)
	}
	adaptertest.WantLocks(t, "a release that answered 0", reg)
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
