package watchdog_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// A holder whose own refresh is on its way (its lock marked busy: the
// watchdog neither renews it nor reports it lost meanwhile) is still told
// by E - d when no renewal was confirmed: the refresh may land after the
// key expired, and the job must stop before anyone else can take the key
// (I15). The network is cut 150 ms after a lock of 300 ms was obtained
// (renewals and the holder's refresh alike hang until their context
// ends); the holder's refresh, sent just after the cut, waits 1 s. Seen
// failing before: the holder was told only once its refresh had failed,
// 1 s after the cut, 700 ms after its key could expire.
func TestToldWhileRefreshOnItsWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		net := &jitterThenCut{} // no jitter: only the cut
		e.rdb.AddHook(net)
		wd := attach(t, e.reg)
		defer wd.Stop()
		const ttl = 300 * time.Millisecond
		e.obtain(t, "busy", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "busy")
		defer cancel()
		var toldAt atomic.Int64
		context.AfterFunc(ctx, func() { toldAt.Store(time.Now().UnixNano()) })
		time.Sleep(150 * time.Millisecond)
		cut := time.Now()
		net.cut.Store(cut.UnixNano())
		refreshed := make(chan error, 1)
		go func() {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
			defer rcancel()
			refreshed <- e.rdb.Eval(rctx, refreshScript, []string{"busy"}, "me", ttl.Milliseconds()).Err()
		}()
		<-refreshed
		synctest.Wait()
		// The last renewal Redis confirmed was sent before the cut: E is
		// at most a TTL after it, and d = TTL/100 + 2 ms.
		bound := cut.Add(ttl - ttl/100 - 2*time.Millisecond)
		switch told := toldAt.Load(); {
		case told == 0:
			t.Fatalf("never told while its refresh was on its way (the refresh ended %v after the cut)", time.Since(cut))
		case time.Unix(0, told).After(bound):
			t.Errorf("told %v after the cut, want by %v (E - d at the latest): its refresh was on its way", time.Unix(0, told).Sub(cut), bound.Sub(cut))
		}
		if c := context.Cause(ctx); !errors.Is(c, watchdog.ErrUnconfirmed) {
			t.Errorf("cause %v, want ErrUnconfirmed", c)
		}
		if st := wd.Stats(); st.ToldLate != 0 || st.Unconfirmed != 1 {
			t.Errorf("Stats: ToldLate %d, Unconfirmed %d; want 0 and 1 (told once, by its tell time: virtual time runs nothing late)", st.ToldLate, st.Unconfirmed)
		}
	})
}

// The same for a long lock that the sweep renews on its tick, not the
// schedule: a sweep leaves a lock whose holder's command is on its way
// alone, and the holder must still be told by E - d. A lock of 6 s under
// "@every 1s", the network cut 1.5 s after the obtain (after the sweep
// of 1 s renewed it), the holder's refresh sent just after with a 10 s
// timeout.
func TestToldWhileRefreshOnItsWaySwept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		net := &jitterThenCut{}
		e.rdb.AddHook(net)
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"))
		defer wd.Stop()
		const ttl = 6 * time.Second
		e.obtain(t, "busy", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "busy")
		defer cancel()
		var toldAt atomic.Int64
		context.AfterFunc(ctx, func() { toldAt.Store(time.Now().UnixNano()) })
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if st := wd.Stats(); st.Renewals == 0 || st.FastLane != 0 {
			t.Fatalf("by the cut: stats %+v; want the lock renewed by a sweep, and not in the fast lane (the case this test is for)", st)
		}
		cut := time.Now()
		net.cut.Store(cut.UnixNano())
		refreshed := make(chan error, 1)
		go func() {
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer rcancel()
			refreshed <- e.rdb.Eval(rctx, refreshScript, []string{"busy"}, "me", ttl.Milliseconds()).Err()
		}()
		<-refreshed
		synctest.Wait()
		bound := cut.Add(ttl - ttl/100 - 2*time.Millisecond)
		switch told := toldAt.Load(); {
		case told == 0:
			t.Fatalf("never told while its refresh was on its way (the refresh ended %v after the cut)", time.Since(cut))
		case time.Unix(0, told).After(bound):
			t.Errorf("told %v after the cut, want by %v (E - d at the latest): its refresh was on its way", time.Unix(0, told).Sub(cut), bound.Sub(cut))
		}
	})
}
