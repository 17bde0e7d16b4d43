package ownership_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// callTimeout is the context an application's lock command gets in these
// scenarios; callBound is how long it may take (plus the measured lag):
// against a healthy loopback server, a lock command answers in well under
// a millisecond.
const (
	callTimeout = 3 * time.Second
	callBound   = time.Second
)

// call runs one of the application's lock commands with a context of
// callTimeout, on a goroutine of its own, and fails t when it does not
// return, takes longer than callBound (plus lag) or fails (unless
// errOK). A command that does not return is left running; call reports
// whether it returned, and the scenario must not go on without it (what fn
// sets is not safe to read).
func (a *app) call(t *testing.T, what string, errOK bool, fn func(ctx context.Context) error) (returned bool) {
	t.Helper()
	start := time.Now()
	var err error
	returned = harness.Within(callTimeout+time.Second, func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		err = fn(ctx)
	})
	took := time.Since(start)
	switch {
	case !returned:
		t.Errorf("%s did not return within %v (its context: %v): it hangs, want it to return; goroutines in lockwatch code:%s",
			what, callTimeout+time.Second, callTimeout, hungStacks())
	case took > a.Lag.Bound(callBound, start):
		t.Errorf("%s took %v (err %v), want at most %v (%v + measured lag)", what, took.Round(time.Millisecond), err, a.Lag.Bound(callBound, start), callBound)
	case err != nil && !errOK:
		t.Errorf("%s: got %v, want nil", what, err)
	}
	return returned
}

// callbackPanics returns Stats().CallbackPanics, or fails t when Stats
// does not return within a second.
func (a *app) callbackPanics(t *testing.T) int64 {
	t.Helper()
	var s watchdog.Stats
	if !harness.Within(time.Second, func() { s = a.WD.Stats() }) {
		t.Errorf("wd.Stats() did not return within 1s, want it to return")
		return -1
	}
	return s.CallbackPanics
}

// TestPanickingFilter: the application's WithFilter function panics. The
// filter is user code (I13): its panic must be recovered, logged and
// counted, and hurt neither the application nor the watchdog. Each case
// runs in a child process (see inChild): a crash or a hang fails it.
//
//   - "short-locks": 300 ms locks, which the fast lane renews between
//     ticks, so the filter may be asked when a lock is obtained: the
//     application's next lock commands on that client (another obtain,
//     the releases) each return within 1 s (plus lag), with a context of
//     3 s.
//   - "long-locks-sweep": 30 s locks, which only a sweep renews: wd.Sweep
//     returns before its context ends, the process does not crash, and
//     the next obtain and the releases return.
//
// In both, Stats().CallbackPanics > 0 afterwards.
func TestPanickingFilter(t *testing.T) {
	filter := watchdog.WithFilter(func(registry.Lock) bool { panic("ownership test: the Filter panics") })
	for _, c := range []struct {
		name  string
		ttl   time.Duration
		sweep bool
	}{
		{"short-locks", 300 * time.Millisecond, false},
		{"long-locks-sweep", 30 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			inChild(t, func(t *testing.T, addr string) {
				rdb := harness.Client(t, addr)
				a := newApp(t, []redis.UniversalClient{rdb}, filter)
				var first, second *harness.Held
				if !a.call(t, "the first redislock Obtain", false, func(context.Context) (err error) {
					first, err = tryObtain(harness.Redislock, rdb, "own:filter:1", c.ttl)
					return err
				}) {
					t.FailNow()
				}
				if c.sweep && !a.call(t, "wd.Sweep", true, sweepErr(a.WD)) {
					t.FailNow()
				}
				if !a.call(t, "the next lock command, a redislock Obtain of another key", false, func(context.Context) (err error) {
					second, err = tryObtain(harness.Redislock, rdb, "own:filter:2", c.ttl)
					return err
				}) {
					t.FailNow()
				}
				for _, h := range []*harness.Held{first, second} {
					if h != nil && !a.call(t, "the release of "+h.Key, false, h.Release) {
						t.FailNow()
					}
				}
				if n := a.callbackPanics(t); n <= 0 {
					t.Errorf("wd.Stats().CallbackPanics after the Filter panicked = %d, want > 0", n)
				}
			})
		})
	}
}

// sweepErr is wd.Sweep as one of call's commands: a Sweep that returns an
// error of its renewals has returned, which is all these scenarios ask;
// one that ran out of its context has not.
func sweepErr(wd *watchdog.Watchdog) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := wd.Sweep(ctx); errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}

// TestPanickingSubscriber: a registry subscriber (reg.Subscribe) panics on
// every event, while locks are obtained (redislock and redsync), released,
// and lost (deleted by a client no registry watches, then found gone by
// wd.Sweep). It runs in a child process (see inChild). The process must
// not crash or hang; every lock command of the application returns
// normally, within 1 s (plus lag); the lost lock is reported once; and
// Stats().CallbackPanics > 0.
func TestPanickingSubscriber(t *testing.T) {
	inChild(t, func(t *testing.T, addr string) {
		const ttl = 30 * time.Second
		rdb := harness.Client(t, addr)
		a := newApp(t, []redis.UniversalClient{rdb})
		spy := harness.NewSpy(t, addr)
		unsubscribe := a.Reg.Subscribe(func(registry.Event) { panic("ownership test: the subscriber panics") })
		defer unsubscribe()

		obtain := func(lib, key string) *harness.Held {
			var h *harness.Held
			if !a.call(t, lib+" obtain of "+key, false, func(context.Context) (err error) {
				h, err = tryObtain(lib, rdb, key, ttl)
				return err
			}) || h == nil {
				t.FailNow()
			}
			return h
		}
		release := func(h *harness.Held) {
			if !a.call(t, h.Lib+" release of "+h.Key, false, h.Release) {
				t.FailNow()
			}
		}
		kept := obtain(harness.Redislock, "own:sub:kept")
		gone := obtain(harness.Redislock, "own:sub:gone")
		mutex := obtain(harness.Redsync, "own:sub:redsync")
		release(kept)
		deleted := time.Now()
		if n, err := spy.Del(context.Background(), gone.Key).Result(); err != nil || n != 1 {
			t.Fatalf("unwatched client DEL %s: got %d, %v, want 1, nil", gone.Key, n, err)
		}
		if !a.call(t, "wd.Sweep after the DEL", true, sweepErr(a.WD)) {
			t.FailNow()
		}
		if evs := a.Lost.WaitOf(gone.Key, gone.Value, 2*time.Second); len(evs) != 1 {
			t.Errorf("OnLost calls for the deleted lock %v: got %d, want 1; %s", gone, len(evs), a.describeLost(deleted))
		}
		release(mutex)
		release(obtain(harness.Redislock, "own:sub:again"))
		if n := a.callbackPanics(t); n <= 0 {
			t.Errorf("wd.Stats().CallbackPanics after the subscriber panicked on every event = %d, want > 0", n)
		}
	})
}
