package ownership_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// tellBound is how long after the new owner's obtain returned the previous
// owner's context may still run (plus the measured lag): the watched
// client saw the obtain, so nothing needs to be asked of Redis.
const tellBound = 100 * time.Millisecond

// TestTakenInProcess: goroutine A holds K (redislock, TTL 3 s) and runs
// its job under wd.Context(ctx, K). A client no registry watches deletes K
// (another process, an operator, a FLUSHDB), and goroutine B of the same
// process takes K at once through the same watched client, with redsync or
// with redislock. The registry sees K obtained with another value (I11):
//
//   - A's context is cancelled no later than 100 ms (plus the measured
//     lag) after B's obtain returned, with a cause matching ErrLost and
//     ErrLockTaken;
//   - OnLost is called exactly once for A's lock (its Value is A's) and
//     never for B's;
//   - B's lock is tracked with B's value and renewed: B's own context,
//     taken after B obtained, is not cancelled while B holds K for longer
//     than its TTL, and K keeps B's value with a positive PTTL throughout.
func TestTakenInProcess(t *testing.T) {
	const (
		ttl  = 3 * time.Second
		hold = ttl + 500*time.Millisecond // B holds K past its TTL
	)
	for _, c := range []struct{ name string }{{harness.Redsync}, {harness.Redislock}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := testredis.Start(t)
			rdb := harness.Client(t, srv.Addr)
			a := newApp(t, []redis.UniversalClient{rdb})
			spy := harness.NewSpy(t, srv.Addr)
			key := "own:taken:" + c.name

			lockA := harness.MustObtain(t, harness.Redislock, rdb, key, ttl)
			t.Cleanup(func() { harness.ReleaseQuietly(lockA) })
			jobA, cancelA := a.WD.Context(context.Background(), key)
			defer cancelA()
			if cause := context.Cause(jobA); cause != nil {
				t.Fatalf("A's wd.Context(%q) right after A's obtain: ended with %s, want it running", key, reasonName(cause))
			}
			doneA := watchDone(jobA)

			// The intruder's DEL and B's obtain follow each other at once:
			// no renewal of A's lock falls between them (it runs every
			// TTL/3), so the watchdog learns of the loss from B's obtain.
			if n, err := spy.Del(context.Background(), key).Result(); err != nil || n != 1 {
				t.Fatalf("unwatched client DEL %s: got %d, %v, want 1, nil", key, n, err)
			}
			startB := time.Now()
			lockB, err := tryObtain(c.name, rdb, key, ttl)
			obtainedB := time.Now()
			if err != nil {
				t.Fatalf("B's %s obtain of %s right after the DEL: got %v, want nil", c.name, key, err)
			}
			t.Cleanup(func() { harness.ReleaseQuietly(lockB) })
			jobB, cancelB := a.WD.Context(context.Background(), key)
			defer cancelB()
			doneB := watchDone(jobB)
			if doneB.ended() {
				t.Errorf("B's wd.Context(%q) taken right after B's obtain: ended with %s, want it running while B holds %s", key, reasonName(context.Cause(jobB)), key)
			}

			// A must be told.
			if at := doneA.wait(2 * time.Second); at.IsZero() {
				t.Errorf("A's context was not cancelled within 2s of B's %s obtain of %s, want it cancelled within %v with ErrLockTaken; %s",
					c.name, key, tellBound, a.describeLost(startB))
			} else {
				bound := a.Lag.Bound(tellBound, startB)
				cause := context.Cause(jobA)
				if late := at.Sub(obtainedB); late > bound {
					t.Errorf("A's context cancelled %v after B's obtain returned, want at most %v (%v + measured lag)", late.Round(time.Millisecond), bound, tellBound)
				}
				if at.Before(startB) {
					// A renewal found the key deleted before B asked for it:
					// the watchdog could not know of B yet.
					if !errors.Is(cause, watchdog.ErrLockGone) {
						t.Errorf("A's context cancelled before B's obtain began with cause %s, want ErrLockGone", reasonName(cause))
					}
				} else if !errors.Is(cause, watchdog.ErrLost) || !errors.Is(cause, watchdog.ErrLockTaken) {
					t.Errorf("context.Cause(A's context) = %s, want it to match both ErrLost and ErrLockTaken", reasonName(cause))
				}
			}

			// B holds K past its TTL: its lock must be renewed, and its
			// context left alone.
			kw := newKeyWatch(spy, startB, lockB)
			kw.run(hold, doneB.ended)
			if doneB.ended() {
				t.Errorf("B's context ended with %s at %+.3fs while B held %s, want it running (%s)",
					reasonName(context.Cause(jobB)), doneB.at.Sub(startB).Seconds(), key, a.describeLost(startB))
			}
			if bad := kw.bad[lockB]; bad != "" {
				t.Errorf("while B held %s for %v (TTL %v): the key was %s, want B's value %s with a positive PTTL throughout (%s)",
					key, hold, ttl, bad, harness.Short(lockB.Value), a.describeLost(startB))
			}
			if l, ok := a.Reg.Get(rdb, key); !ok || l.Value != lockB.Value {
				t.Errorf("reg.Get(rdb, %q) while B holds it: got value %q, tracked %v, want B's value %s, tracked", key, harness.Short(l.Value), ok, harness.Short(lockB.Value))
			}

			evsA, evsB := a.Lost.Of(lockA.Key, lockA.Value), a.Lost.Of(lockB.Key, lockB.Value)
			if len(evsA) != 1 {
				t.Errorf("OnLost calls for A's lock (value %s): got %d, want 1; %s", harness.Short(lockA.Value), len(evsA), a.describeLost(startB))
			} else if !errors.Is(evsA[0].Err, watchdog.ErrLost) {
				t.Errorf("OnLost for A's lock: got reason %s, want one matching ErrLost", reasonName(evsA[0].Err))
			}
			if len(evsB) != 0 {
				t.Errorf("OnLost calls for B's lock (value %s) while B held it: got %d, want 0; %s", harness.Short(lockB.Value), len(evsB), a.describeLost(startB))
			}

			// B releases K. A's context, told long ago, must not be the
			// one that learns of it: contexts belong to one owner.
			toldA := doneA.ended()
			if err := lockB.Release(context.Background()); err != nil {
				t.Errorf("B's release of %s: got %v, want nil", key, err)
			}
			if !toldA && !doneA.wait(time.Second).IsZero() {
				t.Errorf("A's context ended only when B released %s, with %s: it followed B's lock, want it ended when B took the key",
					key, reasonName(context.Cause(jobA)))
			}
			if !t.Failed() {
				t.Logf("A told %v after B's %s obtain returned (%s); B's lock kept %v, least PTTL %v",
					doneA.at.Sub(obtainedB).Round(time.Microsecond), c.name, reasonName(context.Cause(jobA)), hold, kw.least[lockB])
			}
		})
	}
}
