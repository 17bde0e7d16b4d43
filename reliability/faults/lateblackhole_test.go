package faults_test

import (
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// TestNetworkFaultsShortBlackholeAtTheBound is TestNetworkFaultsShortBlackhole
// with the blackhole starting once the least time a lock has left has come
// down to 1.3 s, which that test's bound allows (the 600 ms outage, a
// quarter and a tenth of the 1.5 s TTL, and 150 ms: 1275 ms). The 1.5 s
// locks' renewal (at a third of their TTL) and its hedge then both fall in
// the outage. The locks must never leave the server, none is reported
// lost, and their renewals resume after the healing. It fails on main,
// in both client modes, on an idle machine: the hedge is waited for past
// the locks' expiry, and they expire 700 ms after the network healed. A
// fix that passed it was reverted (see the skip).
func TestNetworkFaultsShortBlackholeAtTheBound(t *testing.T) {
	skipShort(t)
	const outage, left = 600 * time.Millisecond, 1300 * time.Millisecond
	for _, m := range clientModes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, envConfig{proxy: true, client: m.set})
			e.attach(watchdog.WithSchedule(schedule))
			hs := e.obtainAll("bound-outage", 1500*time.Millisecond, 3*time.Second)
			e.watchFor(500*time.Millisecond, 0, e.newHeldChecker(hs, true))
			start := time.Now()
			e.sweepNow()
			deadline := time.Now().Add(time.Second)
			for !e.confirmedSince(hs, start) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			var least time.Duration
			for {
				least = time.Duration(1<<63 - 1)
				for _, h := range hs {
					l, _ := e.Tracked(h.Key)
					least = min(least, time.Until(l.ConfirmedAt.Add(l.TTL)))
				}
				if least <= left {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if least < left-50*time.Millisecond {
				t.Skipf("the least time a lock had left came down to %v, not %v: the scenario did not happen%s", least, left, e.lag.Note(time.Second))
			}
			healed, _ := e.blackholeHeld(hs, outage)
			resumed := e.waitResumed(hs, healed, 3*time.Second, e.newHeldChecker(hs, false))
			if evs := e.Lost.All(); len(evs) != 0 {
				t.Errorf("OnLost after an outage shorter than the locks' time left: got %d calls (first: %s, %v), want none", len(evs), evs[0].Lock.Key, evs[0].Err)
			}
			t.Logf("least time left at the start %v; renewals resumed after healing: %s; watchdog %+v; worst lag %v",
				least.Round(time.Millisecond), describeDurations(hs, resumed), e.WD.Stats(), e.lag.Worst())
			e.releaseAll(hs)
		})
	}
}
