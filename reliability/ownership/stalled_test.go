package ownership_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// gateRetry is a redislock retry strategy that waits 20 ms between
// attempts, and, once closed, holds its caller in NextBackoff (between two
// attempts, with none in flight) until opened again.
type gateRetry struct {
	closed  atomic.Bool
	once    sync.Once
	waiting chan struct{} // closed when the caller first waits at the closed gate
	open    chan struct{} // closed to let the caller on
	opened  sync.Once
}

func newGateRetry() *gateRetry {
	return &gateRetry{waiting: make(chan struct{}), open: make(chan struct{})}
}

func (g *gateRetry) NextBackoff() time.Duration {
	if g.closed.Load() {
		g.once.Do(func() { close(g.waiting) })
		<-g.open
	}
	return 20 * time.Millisecond
}

func (g *gateRetry) release() { g.opened.Do(func() { close(g.open) }) }

// obtained is the result of an obtain run on a goroutine of its own.
type obtained struct {
	h   *harness.Held
	err error
	at  time.Time // when the obtain returned
}

// TestTakenAfterStall: A holds K (redislock, TTL 1 s) and runs its job
// under wd.Context. The server is SIGSTOPped for 1.5 s, longer than the
// TTL, so K expires; meanwhile another goroutine of the same process asks
// for K through the same watched client, with retries, and wins once the
// server continues:
//
//   - "redislock-wins": B's redislock Obtain (LinearBackoff(20ms), a few
//     seconds), sent while the server is stopped;
//   - "redsync-wins-redislock-waits": B's redislock Obtain was already
//     retrying before the stop (held between two attempts while C wins),
//     and C's redsync Lock (20 ms retries), sent while the server is
//     stopped, wins; B keeps retrying, and must keep failing, while C
//     holds K.
//
// Want: A is told (a cause matching ErrLost) no later than 100 ms (plus
// the measured lag) after the winner's obtain returned (it may be told
// earlier, when the watchdog gives the lock up as unreachable); exactly one
// OnLost for A's value; no OnLost for the winner's value (nor B's) while
// the winner holds K, for twice its TTL; the winner's own context is not
// cancelled meanwhile (but for "may be lost", ErrUnconfirmed, when its
// obtain was sent while the server was stopped) and K keeps its value.
func TestTakenAfterStall(t *testing.T) {
	const (
		ttl   = time.Second
		stall = 1500 * time.Millisecond
		hold  = 2 * ttl
	)
	for _, c := range []struct {
		name       string
		redsyncWin bool
	}{
		{"redislock-wins", false},
		{"redsync-wins-redislock-waits", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := testredis.Start(t)
			rdb := harness.Client(t, srv.Addr)
			t.Cleanup(func() { srv.Resume(t) }) // before the client closes
			a := newApp(t, []redis.UniversalClient{rdb})
			spy := harness.NewSpy(t, srv.Addr)
			key := "own:stall:" + c.name

			lockA := harness.MustObtain(t, harness.Redislock, rdb, key, ttl)
			t.Cleanup(func() { harness.ReleaseQuietly(lockA) })
			jobA, cancelA := a.WD.Context(context.Background(), key)
			defer cancelA()
			doneA := watchDone(jobA)
			time.Sleep(400 * time.Millisecond) // a renewal or so

			// B: redislock, through the watched client.
			ctxB, cancelB := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancelB()
			gate := newGateRetry()
			defer gate.release()
			resB := make(chan obtained, 1)
			obtainB := func(retry redislock.RetryStrategy) {
				l, err := redislock.New(rdb).Obtain(ctxB, key, ttl, &redislock.Options{RetryStrategy: retry})
				r := obtained{err: err, at: time.Now()}
				if err == nil {
					r.h = harness.HeldRedislock(l, ttl)
				}
				resB <- r
			}
			if c.redsyncWin {
				// B retries while A holds K, and is held between two
				// attempts before the stop.
				go obtainB(gate)
				time.Sleep(100 * time.Millisecond)
				gate.closed.Store(true)
				select {
				case <-gate.waiting:
				case r := <-resB:
					t.Fatalf("B's redislock Obtain of %s while A holds it returned %v, %v, want it retrying", key, r.h, r.err)
				case <-time.After(2 * time.Second):
					t.Fatalf("B's redislock Obtain of %s did not come back for a retry within 2s", key)
				}
			}

			srv.Pause(t)
			paused := time.Now()
			var resC chan obtained
			if c.redsyncWin {
				resC = make(chan obtained, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
					defer cancel()
					m := harness.NewMutex([]redis.UniversalClient{rdb}, key, ttl, redsync.WithTries(300), redsync.WithRetryDelay(20*time.Millisecond))
					err := m.LockContext(ctx)
					r := obtained{err: err, at: time.Now()}
					if err == nil {
						r.h = harness.HeldRedsync(m, ttl)
					}
					resC <- r
				}()
			} else {
				go obtainB(redislock.LimitRetry(redislock.LinearBackoff(20*time.Millisecond), 250))
			}
			time.Sleep(time.Until(paused.Add(stall)))
			srv.Resume(t)
			resumed := time.Now()

			winner, res := "B (redislock)", resB
			if c.redsyncWin {
				winner, res = "C (redsync)", resC
			}
			var w obtained
			select {
			case w = <-res:
			case <-time.After(6 * time.Second):
				t.Fatalf("%s's obtain of %s did not return within 6s of the server continuing", winner, key)
			}
			if w.err != nil {
				t.Fatalf("%s's obtain of %s after the stall: got %v, want nil (%s)", winner, key, w.err, a.describeLost(paused))
			}
			t.Cleanup(func() { harness.ReleaseQuietly(w.h) })
			t.Logf("%s obtained %s %v after the server continued", winner, key, w.at.Sub(resumed).Round(time.Millisecond))
			jobW, cancelW := a.WD.Context(context.Background(), key)
			defer cancelW()
			doneW := watchDone(jobW)
			gate.release() // B tries again, every 20 ms, while the winner holds K

			// A must have been told.
			if at := doneA.wait(2 * time.Second); at.IsZero() {
				t.Errorf("A's context was not cancelled within 2s of %s's obtain, want it cancelled within %v with a cause matching ErrLost; %s",
					winner, tellBound, a.describeLost(paused))
			} else {
				bound := a.Lag.Bound(tellBound, paused)
				cause := context.Cause(jobA)
				if late := at.Sub(w.at); late > bound {
					t.Errorf("A's context cancelled %v after %s's obtain returned, want at most %v (%v + measured lag)", late.Round(time.Millisecond), winner, bound, tellBound)
				}
				if !errors.Is(cause, watchdog.ErrLost) {
					t.Errorf("context.Cause(A's context) = %s (at %+.3fs from the SIGSTOP), want it to match ErrLost", reasonName(cause), at.Sub(paused).Seconds())
				}
			}

			// The winner holds K past its TTL.
			kw := newKeyWatch(spy, paused, w.h)
			kw.run(hold, doneW.ended)
			// B's redislock obtain that wins was sent while the server was
			// stopped, and answered after it continued, more than a TTL
			// later: Redis may have set the key when it was sent, and the
			// key may have expired before the answer came. Its holder may
			// be told so (ErrUnconfirmed, I15), but the lock is not lost.
			// redsync refuses such an acquire itself: C's is sent after
			// the server continued.
			mayBeTold := !c.redsyncWin
			if doneW.ended() && !(mayBeTold && errors.Is(context.Cause(jobW), watchdog.ErrUnconfirmed)) {
				t.Errorf("%s's context ended with %s at %+.3fs while it held %s, want it running (%s)",
					winner, reasonName(context.Cause(jobW)), doneW.at.Sub(paused).Seconds(), key, a.describeLost(paused))
			}
			if bad := kw.bad[w.h]; bad != "" {
				t.Errorf("while %s held %s for %v (TTL %v): the key was %s, want its value %s with a positive PTTL throughout (%s)",
					winner, key, hold, ttl, bad, harness.Short(w.h.Value), a.describeLost(paused))
			}
			if c.redsyncWin {
				cancelB()
				select {
				case r := <-resB:
					if r.err == nil {
						t.Errorf("B's redislock Obtain of %s succeeded at %+.3fs while C held it, want it to fail", key, r.at.Sub(paused).Seconds())
						harness.ReleaseQuietly(r.h)
					}
				case <-time.After(2 * time.Second):
					t.Errorf("B's redislock Obtain did not return within 2s of its context's end")
				}
			}

			evsA, evsW := a.Lost.Of(lockA.Key, lockA.Value), a.Lost.Of(w.h.Key, w.h.Value)
			if len(evsA) != 1 {
				t.Errorf("OnLost calls for A's lock (value %s): got %d, want 1; %s", harness.Short(lockA.Value), len(evsA), a.describeLost(paused))
			}
			if len(evsW) != 0 {
				t.Errorf("OnLost calls for %s's lock (value %s) while it held %s: got %d, want 0; %s", winner, harness.Short(w.h.Value), key, len(evsW), a.describeLost(paused))
			}
			if n := len(a.Lost.All()); n != len(evsA)+len(evsW) {
				t.Errorf("OnLost calls for other values than A's and %s's: got %d, want 0; %s", winner, n-len(evsA)-len(evsW), a.describeLost(paused))
			}
			if !t.Failed() {
				t.Logf("A told at %+.3fs from the SIGSTOP (%v after %s's obtain) with %s; %s",
					doneA.at.Sub(paused).Seconds(), doneA.at.Sub(w.at).Round(time.Millisecond), winner, reasonName(context.Cause(jobA)), a.describeLost(paused))
			}
		})
	}
}
