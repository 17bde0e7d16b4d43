package watchdog_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// A lock whose endpoint falls silent (every renew call hangs until its
// context ends, as on a stopped server) is given up as unreachable once
// its key may have expired, not before (I12), and by its give-up time:
// with renewals left unanswered on their way, a quarter of its TTL after
// E (the lane lags by nothing in virtual time). Calls still on their way
// then do not hold the report back. Locks of 300 ms, 1 s and 2 s, the
// endpoint silent from 200 ms after the obtain; the key's expiry on the
// server is read from outside at the cut (no renewal reaches it after).
// Goroutines spin beside the bubble at GOMAXPROCS=1, as on a busy CI
// host: the runtime's real waits for a CPU mean nothing in virtual time
// (watchdog.Bubble). Seen failing without that, 2 of 5 (a 300 ms lock
// given up 578 ms after the cut, a 1 s lock 1.725 s after): the
// once unexplained failure of this test (stop 54's note, gap 4).
func TestGivenUpOnTimeWhenSilent(t *testing.T) {
	defer watchdog.Spin(4)()
	for _, ttl := range []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second} {
		t.Run(fmt.Sprint(ttl), func(t *testing.T) {
			watchdog.Bubble(t, func(t *testing.T) {
				cut, expires, reported := silentReport(t, ttl, 0)
				if bound := expires.Add(ttl/4 + 5*time.Millisecond); reported.Before(expires) || reported.After(bound) {
					t.Errorf("reported %v after the cut, want from %v (the key's expiry on the server) to %v (E + TTL/4, and a pass)", reported.Sub(cut), expires.Sub(cut), bound.Sub(cut))
				}
			})
		})
	}
}

// A lagging scheduler gives a silent endpoint's lock up later, and within
// a bound that tests on real servers wait for: a renewal sent just before
// E may have renewed the key then (its answer lost on the way), so the key
// may live a TTL past E, and the give-up waits lagFactor (4) times the lag
// more, up to a TTL. So a lock is given up by E + TTL + min(4 lag, TTL):
// up to three TTLs after the last renewal Redis confirmed, and not before
// its key expired (I12). Here a 2 s lock is given up 3.9 s after the cut
// at a lag of 100 ms and 4.9 s after it at 300 ms, while
// reliability/isolation's TestLostReasonWrapsCause waited 4 s for its 2 s
// locks (CI run 164 here: "2 of 6 locks not reported within 4s of the
// fault"). The test failed with the give-up's allowance for lag doubled.
func TestGivenUpWithinBoundWhenSilentLagging(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second, 2 * time.Second} {
		for _, lag := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond} {
			t.Run(fmt.Sprint(ttl, "/lag ", lag), func(t *testing.T) {
				watchdog.Bubble(t, func(t *testing.T) {
					cut, expires, reported := silentReport(t, ttl, lag)
					if bound := expires.Add(ttl + min(4*lag, ttl) + 5*time.Millisecond); reported.Before(expires) || reported.After(bound) {
						t.Errorf("reported %v after the cut, want from %v (the key's expiry on the server) to %v (E + TTL + min(4 lag, TTL), and a pass)", reported.Sub(cut), expires.Sub(cut), bound.Sub(cut))
					}
				})
			})
		}
	}
}

// silentReport holds a lock of ttl with a watchdog whose schedulers count
// a lag of lag, cuts the endpoint off 200 ms after the obtain (every renew
// call hangs until its context ends) and returns when it was cut, when the
// key expired on the server, and when the lock was reported, once, as
// unreachable.
func silentReport(t *testing.T, ttl, lag time.Duration) (cut, expires, reported time.Time) {
	t.Helper()
	e := newEnv(t)
	net := &jitterThenCut{}
	e.rdb.AddHook(net)
	lost := &lossLog{}
	wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
	defer wd.Stop()
	if lag > 0 {
		defer wd.SetLagFloor(lag)()
	}
	e.obtain(t, "k", "me", ttl)
	time.Sleep(200 * time.Millisecond)
	synctest.Wait()
	cut = time.Now()
	expires = cut.Add(e.pttl("k"))
	net.cut.Store(cut.UnixNano())
	for time.Since(cut) < 4*ttl && reported.IsZero() {
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if keys, _ := lost.get(); len(keys) > 0 {
			reported = time.Now()
		}
	}
	if keys, errs := lost.get(); len(keys) != 1 || !errors.Is(errs[0], watchdog.ErrUnreachable) {
		t.Fatalf("reports %v %v within %v of the cut, want one, ErrUnreachable (the key expired %v after the cut)", keys, errs, 4*ttl, expires.Sub(cut))
	}
	return cut, expires, reported
}
