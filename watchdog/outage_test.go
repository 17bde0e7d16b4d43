package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// outage is a gate on which a renew call that reaches it between from and
// to is lost, like a request sent into a network blackhole: it never
// answers, and hangs until its context ends, even once the network is back
// (its connection stays silent). Calls before and after reach the server.
func outage(from, to time.Time) gate {
	return func(ctx context.Context, cmds ...redis.Cmder) error {
		if _, n := renewKeys(cmds); n == 0 {
			return nil
		}
		if now := time.Now(); !now.Before(from) && now.Before(to) {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// A renewal hedged into a network outage, whose hedge is lost in the
// outage too, is not waited for past its lock's expiry: the lock is sent
// again once the network is back, while it has time left (the design's
// "retry until the TTL since the last confirmed renewal has passed").
// Today the hedge's wait has the lane's round trip, raised to the whole
// wait of the call it replaced, four times as its floor, capped only at
// the give-up time (after the expiry): nothing is sent for the lock after
// the network heals, and it expires (TestNetworkFaultsShortBlackhole,
// ctxtimeout, in CI).
//
// A lock of 1.5 s; renew calls are lost from 200 to 800 ms after it was
// obtained (its first renewal, at 500 ms, and that renewal's hedge, at
// 750 ms, both fall in the outage); 700 ms are left when the network
// heals. The lock must never leave the server nor be reported lost.
func TestHedgeLostInOutageLeavesRoomForARetry(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		start := time.Now()
		e.rdb.AddHook(outage(start.Add(200*time.Millisecond), start.Add(800*time.Millisecond)))
		lost := &lossLog{}
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
		defer wd.Stop()
		const ttl = 1500 * time.Millisecond
		e.obtain(t, "k", "me", ttl)
		keptOnServer(t, e, wd, "k", ttl, start, 300, " (network back at 800 ms)")
		if keys, errs := lost.get(); len(keys) > 0 {
			t.Errorf("OnLost: %v (%v), want none", keys, errs)
		}
		if st := wd.Stats(); st.Hedges == 0 {
			t.Errorf("Stats().Hedges = 0, want the renewal sent into the outage hedged (the scenario did not happen); stats %+v", st)
		}
		e.release(t, "k", "me")
	})
}

// slow is a gate that delays every renew call by d before it reaches the
// server, whatever its context says: a network that answers, late.
func slow(d time.Duration) gate {
	return func(ctx context.Context, cmds ...redis.Cmder) error {
		if _, n := renewKeys(cmds); n > 0 {
			time.Sleep(d)
		}
		return nil
	}
}

// On a network that answers every renewal 400 ms late, a lock of 1 s with
// WithTimeout(250ms) is kept: its calls are hedged, and their answers,
// late, confirm it. A fix of the flaw above must keep it so: with the cap
// on a hedge's wait of 982a417, TestLateAnswerCause (steady rtt=0.4ttl,
// through the fault proxy) gave up such locks while Redis kept them, in
// CI run 101, under load. This test, without load, passed with that cap
// too (and beside it with every call's start delayed by up to 200 ms):
// what it guards is the scenario, not that failure.
func TestSlowNetworkKeepsItsLocks(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(slow(400 * time.Millisecond))
		lost := &lossLog{}
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost), watchdog.WithTimeout(250*time.Millisecond))
		defer wd.Stop()
		const ttl = time.Second
		start := time.Now()
		e.obtain(t, "k", "me", ttl)
		keptOnServer(t, e, wd, "k", ttl, start, 500, "")
		if keys, errs := lost.get(); len(keys) > 0 {
			t.Errorf("OnLost: %v (%v), want none; stats %+v", keys, errs, wd.Stats())
		}
		if st := wd.Stats(); st.Hedges == 0 {
			t.Errorf("Stats().Hedges = 0, want renewals hedged (the scenario did not happen); stats %+v", st)
		}
		e.release(t, "k", "me")
	})
}

// keptOnServer looks at key every 10 ms, polls times, in a synctest
// bubble, and fails t as soon as it has left the server (obtained at start
// with ttl; note says more of the scenario).
func keptOnServer(t *testing.T, e *env, wd *watchdog.Watchdog, key string, ttl time.Duration, start time.Time, polls int, note string) {
	t.Helper()
	for range polls {
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if e.pttl(key) <= 0 {
			t.Fatalf("%v after it was obtained%s: the lock of %v left the server, want it renewed; stats %+v",
				time.Since(start), note, ttl, wd.Stats())
		}
	}
}
