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
func TestGivenUpOnTimeWhenSilent(t *testing.T) {
	for _, ttl := range []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second} {
		t.Run(fmt.Sprint(ttl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				net := &jitterThenCut{}
				e.rdb.AddHook(net)
				lost := &lossLog{}
				wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
				defer wd.Stop()
				e.obtain(t, "k", "me", ttl)
				time.Sleep(200 * time.Millisecond)
				synctest.Wait()
				cut := time.Now()
				expires := cut.Add(e.pttl("k"))
				net.cut.Store(cut.UnixNano())
				var reported time.Time
				for time.Since(cut) < 3*ttl && reported.IsZero() {
					time.Sleep(time.Millisecond)
					synctest.Wait()
					if keys, _ := lost.get(); len(keys) > 0 {
						reported = time.Now()
					}
				}
				if keys, errs := lost.get(); len(keys) != 1 || !errors.Is(errs[0], watchdog.ErrUnreachable) {
					t.Fatalf("reports %v %v within %v of the cut, want one, ErrUnreachable (the key expired %v after the cut)", keys, errs, 3*ttl, expires.Sub(cut))
				}
				if bound := expires.Add(ttl/4 + 5*time.Millisecond); reported.Before(expires) || reported.After(bound) {
					t.Errorf("reported %v after the cut, want from %v (the key's expiry on the server) to %v (E + TTL/4, and a pass)", reported.Sub(cut), expires.Sub(cut), bound.Sub(cut))
				}
			})
		})
	}
}
