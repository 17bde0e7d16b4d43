package transparency

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
)

// The scenarios of redislock's own tests (obtain, metadata, custom token,
// retry, concurrency, refresh, TTL, release), told again. ttlTolerance is
// how far a TTL reading may be from the TTL last set, as redislock's tests
// allow.
const ttlTolerance = time.Second

// Obtain, read the TTL, fail to obtain again, release, obtain again.
func TestTransparencyRedislockObtainRelease(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		c := redislock.New(r.clients[0])
		lock, err := c.Obtain(r.ctx, r.key("job"), time.Hour, nil)
		r.wantErr("obtain", err, "nil")
		if lock == nil {
			r.t.Fatalf("%s run: obtain returned no lock", r.mode)
		}
		r.want("random token length", len(lock.Token()), 22)
		r.want("metadata", lock.Metadata(), "")
		ttl, err := lock.TTL(r.ctx)
		r.wantErr("TTL", err, "nil")
		r.wantNear("TTL", ttl, time.Hour, ttlTolerance)
		r.settle()
		r.keys("held", map[string]string{lock.Token(): "holder"})

		_, err = c.Obtain(r.ctx, r.key("job"), time.Hour, nil)
		r.wantErr("obtain of a held lock", err, "redislock.ErrNotObtained")

		r.wantErr("release", lock.Release(r.ctx), "nil")
		r.keys("released", nil)
		r.wantErr("release again", lock.Release(r.ctx), "redislock.ErrLockNotHeld")
		ttl, err = lock.TTL(r.ctx)
		r.wantErr("TTL of a released lock", err, "nil")
		r.want("TTL of a released lock", ttl, time.Duration(0))

		again, err := c.Obtain(r.ctx, r.key("job"), time.Hour, nil)
		r.wantErr("obtain after release", err, "nil")
		r.keys("obtained again", map[string]string{again.Token(): "second holder"})
		r.wantErr("release of the second lock", again.Release(r.ctx), "nil")
		r.keys("end", nil)
	})
}

// Metadata is stored after the token and handed back.
func TestTransparencyRedislockMetadata(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		lock, err := redislock.Obtain(r.ctx, r.clients[0], r.key("job"), time.Hour, &redislock.Options{Metadata: "my-data"})
		r.wantErr("obtain with metadata", err, "nil")
		r.want("metadata", lock.Metadata(), "my-data")
		r.want("token length", len(lock.Token()), 22)
		r.settle()
		r.keys("held", map[string]string{lock.Token() + "my-data": "token+metadata"})
		r.wantErr("release", lock.Release(r.ctx), "nil")
		r.keys("end", nil)
	})
}

// A custom token: another caller cannot obtain the lock, the token's owner
// can obtain it again with new metadata, and the old lock's value no longer
// releases it.
func TestTransparencyRedislockCustomToken(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		owners := map[string]string{"foobar": "foo+bar", "foobaz": "foo+baz"}
		first, err := redislock.Obtain(r.ctx, r.clients[0], r.key("job"), time.Hour, &redislock.Options{Token: "foo", Metadata: "bar"})
		r.wantErr("obtain with token foo", err, "nil")
		r.want("token", first.Token(), "foo")
		r.want("metadata", first.Metadata(), "bar")
		r.keys("held", owners)

		_, err = redislock.Obtain(r.ctx, r.clients[0], r.key("job"), time.Hour, nil)
		r.wantErr("obtain with a random token", err, "redislock.ErrNotObtained")

		second, err := redislock.Obtain(r.ctx, r.clients[0], r.key("job"), 30*time.Minute, &redislock.Options{Token: "foo", Metadata: "baz"})
		r.wantErr("obtain again with token foo", err, "nil")
		r.want("token", second.Token(), "foo")
		r.want("metadata", second.Metadata(), "baz")
		ttl, err := second.TTL(r.ctx)
		r.wantErr("TTL", err, "nil")
		r.wantNear("TTL after obtaining again", ttl, 30*time.Minute, ttlTolerance)
		r.settle()
		r.keys("held again", owners)
		ttl, err = second.TTL(r.ctx)
		r.wantErr("TTL", err, "nil")
		r.wantNear("TTL after a sweep", ttl, 30*time.Minute, ttlTolerance)

		r.wantErr("release by the first lock (old metadata)", first.Release(r.ctx), "redislock.ErrLockNotHeld")
		r.keys("after the first lock's release", owners)
		r.wantErr("release by the second lock", second.Release(r.ctx), "nil")
		r.keys("end", owners)
	})
}

// Obtain with retries: until the holder releases, until the retries run
// out, until the context ends, and until the holder's TTL passes (the one
// outcome that differs: a watched holder's lock does not expire).
func TestTransparencyRedislockRetry(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		c := redislock.New(r.clients[0])
		holder, err := c.Obtain(r.ctx, r.key("released"), time.Hour, nil)
		r.wantErr("holder obtains", err, "nil")
		released := make(chan error, 1)
		go func() {
			time.Sleep(150 * time.Millisecond)
			released <- holder.Release(context.Background())
		}()
		start := time.Now()
		waiter, err := c.Obtain(r.ctx, r.key("released"), time.Hour, &redislock.Options{
			RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(25*time.Millisecond), 80),
		})
		waited := time.Since(start)
		r.wantErr("holder releases during the retries", <-released, "nil")
		r.wantErr("obtain with linear backoff until the holder releases", err, "nil")
		r.want("waited for the release", waited >= 150*time.Millisecond, true)
		r.keys("obtained after the release", map[string]string{waiter.Token(): "waiter"})
		r.wantErr("waiter releases", waiter.Release(r.ctx), "nil")

		holder, err = c.Obtain(r.ctx, r.key("held"), time.Hour, nil)
		r.wantErr("holder obtains", err, "nil")
		_, err = c.Obtain(r.ctx, r.key("held"), time.Hour, &redislock.Options{
			RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(5*time.Millisecond), 3),
		})
		r.wantErr("obtain with three retries", err, "redislock.ErrNotObtained")
		ctx, cancel := context.WithTimeout(r.ctx, 150*time.Millisecond)
		_, err = c.Obtain(ctx, r.key("held"), time.Hour, &redislock.Options{
			RetryStrategy: redislock.ExponentialBackoff(2*time.Millisecond, 32*time.Millisecond),
		})
		cancel()
		// v0.9.4 returns the context's error; v0.10.0 joins it to
		// ErrNotObtained.
		r.wantErrIs("obtain with exponential backoff until the context ends", err, context.DeadlineExceeded, "context.DeadlineExceeded")
		r.keys("still held", map[string]string{holder.Token(): "holder"})
		r.wantErr("holder releases", holder.Release(r.ctx), "nil")

		// The holder's TTL passes while the waiter retries.
		short, err := c.Obtain(r.ctx, r.key("expiring"), 300*time.Millisecond, nil)
		r.wantErr("holder obtains for 300ms", err, "nil")
		waiter, err = c.Obtain(r.ctx, r.key("expiring"), time.Hour, &redislock.Options{
			RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(50*time.Millisecond), 18),
		})
		r.wantByMode("obtain while the holder's TTL passes", errKind(err), "nil", "redislock.ErrNotObtained")
		if waiter != nil {
			r.cleanup("waiter releases", waiter.Release(r.ctx), "nil")
		}
		r.wantByMode("holder releases", errKind(short.Release(r.ctx)), "redislock.ErrLockNotHeld", "nil")
		r.keys("end", nil)
	})
}

// Many goroutines obtain one key at once: exactly one gets it.
func TestTransparencyRedislockConcurrent(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		const n = 40
		c := redislock.New(r.clients[0])
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			kinds = map[string]int{}
			won   *redislock.Lock
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.Int64N(int64(10 * time.Millisecond))))
				lock, err := c.Obtain(r.ctx, r.key("job"), time.Minute, nil)
				mu.Lock()
				defer mu.Unlock()
				kinds[errKind(err)]++
				if lock != nil {
					won = lock
				}
			}()
		}
		wg.Wait()
		r.want("outcomes", kinds, map[string]int{"nil": 1, "redislock.ErrNotObtained": n - 1})
		if won != nil {
			r.keys("held", map[string]string{won.Token(): "winner"})
			r.wantErr("winner releases", won.Release(r.ctx), "nil")
		}
		r.keys("end", nil)
	})
}

// Refresh changes the TTL (and a sweep keeps it); a refresh to no TTL
// deletes the lock.
func TestTransparencyRedislockRefresh(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		lock, err := redislock.Obtain(r.ctx, r.clients[0], r.key("job"), time.Hour, nil)
		r.wantErr("obtain", err, "nil")
		ttl, _ := lock.TTL(r.ctx)
		r.wantNear("TTL", ttl, time.Hour, ttlTolerance)
		r.wantErr("refresh to a minute", lock.Refresh(r.ctx, time.Minute, nil), "nil")
		ttl, _ = lock.TTL(r.ctx)
		r.wantNear("TTL after refresh", ttl, time.Minute, ttlTolerance)
		r.settle()
		ttl, _ = lock.TTL(r.ctx)
		r.wantNear("TTL after refresh and a sweep", ttl, time.Minute, ttlTolerance)
		r.wantNear("PTTL on the server", r.pttl(0, "job"), time.Minute, ttlTolerance)
		r.wantErr("refresh to 2s", lock.Refresh(r.ctx, 2*time.Second, nil), "nil")
		r.settle()
		r.wantNear("PTTL after refresh to 2s and a sweep", r.pttl(0, "job"), 2*time.Second, 500*time.Millisecond)
		r.keys("held", map[string]string{lock.Token(): "holder"})

		r.wantErr("refresh to no TTL", lock.Refresh(r.ctx, 0, nil), "nil")
		r.settle()
		r.keys("after refresh to no TTL", nil)
		r.wantErr("refresh after that", lock.Refresh(r.ctx, time.Minute, nil), "redislock.ErrNotObtained")
		r.wantErr("release after that", lock.Release(r.ctx), "redislock.ErrLockNotHeld")
	})
}

// A lock lost behind its holder's back (deleted, or taken by a plain SET)
// is not held, whoever watches: refresh and release fail, the other value
// and its missing TTL stay, and a release through a nil lock fails too.
func TestTransparencyRedislockLost(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		c := redislock.New(r.clients[0])
		deleted, err := c.Obtain(r.ctx, r.key("deleted"), time.Hour, nil)
		r.wantErr("obtain", err, "nil")
		taken, err := c.Obtain(r.ctx, r.key("taken"), time.Hour, nil)
		r.wantErr("obtain", err, "nil")
		if err := r.admin[0].Del(r.ctx, r.key("deleted")).Err(); err != nil {
			r.t.Fatal(err)
		}
		if err := r.admin[0].Set(r.ctx, r.key("taken"), "ABCD", 0).Err(); err != nil {
			r.t.Fatal(err)
		}
		r.settle()
		r.keys("after DEL and SET", map[string]string{"ABCD": "ABCD"})
		r.want("PTTL of the taken key", r.pttl(0, "taken"), time.Duration(-1))

		r.wantErr("refresh of a deleted lock", deleted.Refresh(r.ctx, time.Hour, nil), "redislock.ErrNotObtained")
		ttl, err := deleted.TTL(r.ctx)
		r.wantErr("TTL of a deleted lock", err, "nil")
		r.want("TTL of a deleted lock", ttl, time.Duration(0))
		r.wantErr("release of a deleted lock", deleted.Release(r.ctx), "redislock.ErrLockNotHeld")
		r.wantErr("refresh of a taken lock", taken.Refresh(r.ctx, time.Hour, nil), "redislock.ErrNotObtained")
		r.wantErr("release of a taken lock", taken.Release(r.ctx), "redislock.ErrLockNotHeld")
		r.settle()
		r.keys("end", map[string]string{"ABCD": "ABCD"})
		r.want("PTTL of the taken key", r.pttl(0, "taken"), time.Duration(-1))

		// Obtain fails on a held key and returns a nil lock, whose release fails.
		nothing, err := c.Obtain(r.ctx, r.key("taken"), time.Minute, nil)
		r.wantErr("obtain of the taken key", err, "redislock.ErrNotObtained")
		r.want("lock returned", nothing == nil, true)
		r.wantErr("release of a nil lock", nothing.Release(r.ctx), "redislock.ErrLockNotHeld")
	})
}

// The one difference: held past its TTL, an unwatched lock expires (refresh
// fails, release finds nothing) while a watched one is still held.
func TestTransparencyRedislockHeldPastTTL(t *testing.T) {
	t.Parallel()
	both(t, 1, 0, func(r *run) {
		const ttl = 500 * time.Millisecond
		c := redislock.New(r.clients[0])
		refreshed, err := c.Obtain(r.ctx, r.key("refreshed"), ttl, nil)
		r.wantErr("obtain", err, "nil")
		released, err := c.Obtain(r.ctx, r.key("released"), ttl, nil)
		r.wantErr("obtain", err, "nil")
		r.wantTracked(2)
		r.hold(3 * ttl)

		left, err := refreshed.TTL(r.ctx)
		r.wantErr("TTL after holding for 3 TTLs", err, "nil")
		r.wantByMode("TTL left after holding for 3 TTLs is above 0", left > 0, false, true)
		r.wantByMode("TTL left is at most the TTL", left <= ttl, true, true)
		r.wantByMode("refresh after holding for 3 TTLs", errKind(refreshed.Refresh(r.ctx, ttl, nil)), "redislock.ErrNotObtained", "nil")
		r.wantByMode("release after holding for 3 TTLs", errKind(released.Release(r.ctx)), "redislock.ErrLockNotHeld", "nil")
		if r.mode == watched {
			r.cleanup("release of the refreshed lock", refreshed.Release(r.ctx), "nil")
		}
		r.keys("end", nil)
	})
}
