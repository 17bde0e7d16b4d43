package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/faultproxy"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/watchdog"
)

// schedule is the sweep schedule of the network scenarios: ticks renew the
// long locks, the fast lane the short ones.
const schedule = "@every 1s"

// sample is how often the scenarios look at the server.
const sample = 10 * time.Millisecond

// watchFor samples the server every sample for d and hands each sample to
// each checker.
func (e *env) watchFor(d, extra time.Duration, chks ...*heldChecker) {
	e.t.Helper()
	start := time.Now()
	keys := make([]string, 0)
	for _, c := range chks {
		keys = append(keys, harness.KeysOf(c.hs)...)
	}
	for time.Since(start) < d {
		time.Sleep(sample)
		st := e.mustStates(keys)
		for _, c := range chks {
			c.check(st, extra)
		}
	}
}

// sweepNow renews every tracked lock now, so that each has its whole TTL
// left when a fault begins.
func (e *env) sweepNow() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.WD.Sweep(ctx); err != nil {
		e.t.Fatalf("Sweep before the fault: got %v, want nil", err)
	}
}

// confirmedSince reports whether Redis confirmed a renewal of every lock of
// hs sent at since or later.
func (e *env) confirmedSince(hs []*harness.Held, since time.Time) bool {
	for _, h := range hs {
		if l, ok := e.Tracked(h.Key); !ok || l.ConfirmedAt.Before(since) {
			return false
		}
	}
	return true
}

// blackholeHeld blackholes the proxy for outage, checks every sample
// that the locks hs stay held on the server meanwhile (with during), and
// returns when the network healed.
func (e *env) blackholeHeld(hs []*harness.Held, outage time.Duration) (healed time.Time, during *heldChecker) {
	e.proxy.Blackhole(outage)
	during = e.newHeldChecker(hs, false)
	for e.proxy.Blackholed() {
		time.Sleep(sample)
		during.check(e.mustStates(harness.KeysOf(hs)), 0)
	}
	return time.Now(), during
}

// waitResumed waits until Redis has confirmed a renewal of every lock sent
// after since, checking with chk meanwhile that they stay held, and returns
// how long after since each was confirmed (by the renewal's send time).
func (e *env) waitResumed(hs []*harness.Held, since time.Time, within time.Duration, chk *heldChecker) map[string]time.Duration {
	e.t.Helper()
	resumed := make(map[string]time.Duration)
	keys := harness.KeysOf(hs)
	for len(resumed) < len(hs) {
		if time.Since(since) > within+e.lag.Since(since) {
			e.t.Fatalf("renewals after the fault: %d of %d locks renewed within %v, want all%s", len(resumed), len(hs), within, e.lag.Note(within))
		}
		time.Sleep(sample)
		chk.check(e.mustStates(keys), 0)
		for _, h := range hs {
			l, ok := e.Tracked(h.Key)
			if !ok {
				e.t.Fatalf("%v: untracked while waiting for renewals to resume, want it tracked (OnLost: %v)", h, e.Lost.ForKey(h.Key))
			}
			if _, done := resumed[h.Key]; !done && l.ConfirmedAt.After(since) {
				resumed[h.Key] = l.ConfirmedAt.Sub(since)
			}
		}
	}
	return resumed
}

func describeDurations(hs []*harness.Held, m map[string]time.Duration) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s %v: %v", h.Lib, h.TTL, m[h.Key].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

func describeCounts(hs []*harness.Held, before, after map[string]int64) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s %v: %d->%d", h.Lib, h.TTL, before[h.Key], after[h.Key]))
	}
	return strings.Join(parts, ", ")
}

// TestNetworkFaultsLatency adds 20 ms each way between the watched client
// and the server, with locks of 1.5 s and 3 s: for 3 s every lock stays
// held with its value and a third of its TTL (less the latency), is renewed,
// and nothing is reported lost; each is then released normally.
//
// The latency is added after the locks are obtained and removed before
// they are released: redsync bounds each of its own calls by 5% of the
// expiry (75 ms for 1.5 s), which a client with ContextTimeoutEnabled
// enforces, so redsync itself may fail to obtain or release through a 40 ms
// round trip on a loaded machine.
func TestNetworkFaultsLatency(t *testing.T) {
	skipShort(t)
	for _, m := range clientModes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, envConfig{proxy: true, client: m.set})
			e.attach(watchdog.WithSchedule(schedule))
			const latency = 20 * time.Millisecond
			hs := e.obtainAll("latency", 1500*time.Millisecond, 3*time.Second)
			e.setLatency(latency)
			before := e.renewalsOf(hs)
			chk := e.newHeldChecker(hs, true)
			const d = 3 * time.Second
			e.watchFor(d, 2*latency, chk)
			after := e.renewalsOf(hs)
			for _, h := range hs {
				if after[h.Key] <= before[h.Key] {
					t.Errorf("%v: renewals %d -> %d over %v, want more", h, before[h.Key], after[h.Key], d)
				}
			}
			if evs := e.Lost.All(); len(evs) != 0 {
				t.Errorf("OnLost under latency: got %d calls (first: %s, %v), want none", len(evs), evs[0].Lock.Key, evs[0].Err)
			}
			st := e.WD.Stats()
			t.Logf("latency %v each way for %v: renewals %s; %s; watchdog %+v; worst lag %v",
				latency, d, describeCounts(hs, before, after), chk.summary(), st, e.lag.Worst())
			e.setLatency(0)
			e.releaseAll(hs)
		})
	}
}

// TestNetworkFaultsShortBlackhole renews every lock (1.5 s and 3 s TTLs),
// then blackholes the network for 600 ms, less than any lock has left by
// more than the watchdog may need to renew it once the network heals (a
// retry sent just before the healing times out first): the locks never
// leave the server (same value throughout, seen directly),
// renewals fail during the outage and resume afterwards on their own,
// nothing is reported lost, and each lock keeps a third of its TTL once
// renewed again.
func TestNetworkFaultsShortBlackhole(t *testing.T) {
	skipShort(t)
	for _, m := range clientModes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, envConfig{proxy: true, client: m.set})
			e.attach(watchdog.WithSchedule(schedule))
			hs := e.obtainAll("short-outage", 1500*time.Millisecond, 3*time.Second)
			e.watchFor(500*time.Millisecond, 0, e.newHeldChecker(hs, true))

			const outage = 600 * time.Millisecond
			// After the outage the watchdog needs up to one renewal
			// timeout for a call sent just before the healing, plus one
			// retry delay (a tenth of the TTL): a quarter and a tenth of
			// the TTL and a margin beyond the outage. Every lock must have
			// that much left beyond the outage when it starts. (Not so
			// when a call and its hedge both fall in the outage: an open
			// flaw, see TestNetworkFaultsShortBlackholeAtTheBound.) A lock whose fast-lane renewal is in flight when
			// the sweep runs is skipped by it, so the sweep is repeated
			// until every lock was confirmed since it started.
			need := outage + 1500*time.Millisecond/4 + 1500*time.Millisecond/10 + 150*time.Millisecond
			var left time.Duration
			for range 5 {
				start := time.Now()
				e.sweepNow()
				deadline := time.Now().Add(time.Second)
				for !e.confirmedSince(hs, start) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				now := time.Now()
				left = time.Duration(1<<63 - 1)
				for _, h := range hs {
					l, _ := e.Tracked(h.Key)
					left = min(left, l.ConfirmedAt.Add(l.TTL).Sub(now))
				}
				if left >= need {
					break
				}
			}
			if left < need {
				t.Fatalf("before the outage: the least time a lock has left is %v, want at least %v (the outage, %v, a retry timeout and delay, and a margin)%s", left, need, outage, e.lag.Note(time.Second))
			}
			before := e.WD.Stats()
			renewalsBefore := e.renewalsOf(hs)
			down := time.Now()
			healed, during := e.blackholeHeld(hs, outage)
			for _, h := range hs {
				if l, ok := e.Tracked(h.Key); ok && l.ConfirmedAt.After(down) {
					t.Errorf("%v: confirmed at %v, during the blackhole (%v to %v), want no renewal confirmed", h, l.ConfirmedAt.Format("15:04:05.000"), down.Format("15:04:05.000"), healed.Format("15:04:05.000"))
				}
			}

			resumed := e.waitResumed(hs, healed, 3*time.Second, e.newHeldChecker(hs, false))
			chk := e.newHeldChecker(hs, true)
			e.watchFor(1500*time.Millisecond, 0, chk)
			renewalsAfter := e.renewalsOf(hs)
			st := e.WD.Stats()
			if st.Failures <= before.Failures {
				t.Errorf("watchdog failures: %d before the outage, %d after, want more (renewals attempted during it)", before.Failures, st.Failures)
			}
			if ps := e.proxy.Stats(); ps.Dropped == 0 {
				t.Errorf("proxy: nothing dropped during the blackhole, want the renewals sent then dropped (%+v)", ps)
			}
			if evs := e.Lost.All(); len(evs) != 0 {
				t.Errorf("OnLost after an outage shorter than the locks' time left: got %d calls (first: %s, %v), want none", len(evs), evs[0].Lock.Key, evs[0].Err)
			}
			t.Logf("outage %v (measured %v), least time left at its start %v; during it %s; renewals resumed after healing: %s; renewals %s; after: %s; watchdog %+v (failures during the outage %d); proxy %+v; worst lag %v",
				outage, healed.Sub(down).Round(time.Millisecond), left.Round(time.Millisecond), during.summary(), describeDurations(hs, resumed),
				describeCounts(hs, renewalsBefore, renewalsAfter), chk.summary(), st, st.Failures-before.Failures, e.proxy.Stats(), e.lag.Worst())
			e.releaseAll(hs)
		})
	}
}

// TestNetworkFaultsLongBlackhole renews every lock, then blackholes the
// network for 1.5 s: longer than the short locks' TTLs (300 and 500 ms),
// shorter than the long ones' (4 s).
//
// The short locks are reported through OnLost with ErrUnreachable (an
// ErrLost, neither gone nor taken) once their TTL since the last confirmed renewal has passed, they
// are untracked, and they expire on the server. One of them is taken by an
// intruder client during the outage. After the network returns, the watched
// client sends nothing about the short keys: they stay absent, and the
// intruder's value and expiry stay untouched (even by a release through the
// library). The long locks never leave the server and their renewals
// resume.
func TestNetworkFaultsLongBlackhole(t *testing.T) {
	skipShort(t)
	for _, m := range clientModes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, envConfig{proxy: true, client: m.set})
			e.attach(watchdog.WithSchedule(schedule))
			short := e.obtainAll("long-outage:short", 300*time.Millisecond, 500*time.Millisecond)
			long := e.obtainAll("long-outage:long", 4*time.Second)
			all := append(append([]*harness.Held(nil), short...), long...)
			e.watchFor(600*time.Millisecond, 0, e.newHeldChecker(all, true))
			jobs := make(map[string]*jobWatch, len(short))
			for _, h := range short {
				j := watchJob(e.WD, h.Key)
				defer j.cancel()
				jobs[h.Key] = j
			}

			e.sweepNow()
			const outage = 1500 * time.Millisecond
			const intruderValue, intruderTTL = "intruder", 20 * time.Second
			intruder := short[0]
			var intrudedAt time.Time
			renewalsBefore := e.renewalsOf(long)
			down := time.Now()
			e.proxy.Blackhole(outage)
			longDuring := e.newHeldChecker(long, false)
			var last map[string]harness.KeyState
			for e.proxy.Blackholed() {
				time.Sleep(sample)
				last = e.mustStates(harness.KeysOf(all))
				longDuring.check(last, 0)
				if intrudedAt.IsZero() && !last[intruder.Key].Exists {
					if err := e.spy.Set(context.Background(), intruder.Key, intruderValue, intruderTTL).Err(); err != nil {
						t.Fatalf("intruder SET %s: got %v, want nil", intruder.Key, err)
					}
					intrudedAt = time.Now()
				}
			}
			healed := time.Now()
			if intrudedAt.IsZero() {
				t.Fatalf("%v: never gone on the server during a %v outage, want it expired", intruder, outage)
			}
			for _, h := range short[1:] {
				if s := last[h.Key]; s.Exists {
					t.Errorf("%v: at the end of the outage the server holds %q (PTTL %v), want it expired", h, s.Value, s.PTTL)
				}
			}

			// Reports: every short lock, during the outage, as unreachable.
			evs := e.waitLost(harness.KeysOf(short), time.Second)
			var reported time.Time
			lateness := make(map[string]time.Duration)
			for _, h := range short {
				ev := evs[h.Key]
				reported = later(reported, ev.At)
				if !errors.Is(ev.Err, watchdog.ErrUnreachable) || !errors.Is(ev.Err, watchdog.ErrLost) ||
					errors.Is(ev.Err, watchdog.ErrLockGone) || errors.Is(ev.Err, watchdog.ErrLockTaken) {
					t.Errorf("%v: OnLost reason %v, want ErrUnreachable (an ErrLost, neither gone nor taken)", h, ev.Err)
				}
				if ev.Lock.Value != h.Value {
					t.Errorf("%v: OnLost value %q, want %q", h, ev.Lock.Value, h.Value)
				}
				since := ev.At.Sub(ev.Lock.ConfirmedAt)
				lateness[h.Key] = since - h.TTL
				if since < h.TTL {
					t.Errorf("%v: reported %v after its last confirmed renewal, want no earlier than its TTL", h, since)
				}
				// The holder's question is answered before the key may
				// expire: its context is cancelled by the last confirmed
				// renewal's TTL (lag allowed for the observer).
				expiry := ev.Lock.ConfirmedAt.Add(h.TTL)
				if at, cause := jobs[h.Key].result(); at.IsZero() || !errors.Is(cause, watchdog.ErrLost) {
					t.Errorf("%v: holder's context: cancelled at %v with %v, want cancelled with an ErrLost", h, at, cause)
				} else if at.After(expiry.Add(e.lag.Since(down))) {
					t.Errorf("%v: holder's context cancelled %v after the last confirmed renewal, want by its TTL %v (+ lag %v)", h, at.Sub(ev.Lock.ConfirmedAt), h.TTL, e.lag.Since(down))
				}
				// The report may wait a TTL past the last renewal sent
				// before that expiry: while the process runs late, an
				// unanswered renewal may have been applied with its answer
				// unread (I12), and the key may live a TTL past its send.
				// Sent into the blackhole, none was; the watchdog cannot
				// know, and reports within TTL + 300 ms (+ lag) of it.
				from := e.sent.LastRenewal(h.Key, ev.Lock.ConfirmedAt, expiry)
				if bound := h.TTL + 300*time.Millisecond + e.lag.Since(down); ev.At.Sub(from) > bound {
					t.Errorf("%v: reported %v after its last confirmed renewal, %v after the last renewal sent before its TTL passed, want within %v of that (TTL + 300 ms + lag)", h, since, ev.At.Sub(from), bound)
				}
				if !ev.At.Before(healed) {
					t.Errorf("%v: reported at %v, after the network returned (%v), want during the outage", h, ev.At.Format("15:04:05.000"), healed.Format("15:04:05.000"))
				}
				if l, ok := e.Tracked(h.Key); ok {
					t.Errorf("%v: still tracked after OnLost (value %q), want untracked", h, l.Value)
				}
			}

			// After the network returns.
			longChk := e.newHeldChecker(long, false)
			resumed := e.waitResumed(long, healed, 3*time.Second, longChk)
			floor := e.newHeldChecker(long, true)
			start := time.Now()
			for time.Since(start) < 2*time.Second {
				time.Sleep(sample)
				asked := time.Now() // before the server measured the TTLs
				st := e.mustStates(harness.KeysOf(all))
				floor.check(st, 0)
				for _, h := range short {
					s := st[h.Key]
					if h == intruder {
						if !s.Exists || s.Value != intruderValue {
							t.Fatalf("intruder's %s: server holds (%q, exists %v), want %q", h.Key, s.Value, s.Exists, intruderValue)
						}
						// asked+PTTL is no later than the key's expiry, and
						// the intruder's SET returned at intrudedAt: a later
						// bound means the expiry was moved.
						if expires := asked.Add(s.PTTL); expires.After(intrudedAt.Add(intruderTTL + slack)) {
							t.Fatalf("intruder's %s: expires at least %v later than the intruder set, want its TTL untouched", h.Key, expires.Sub(intrudedAt.Add(intruderTTL)))
						}
						continue
					}
					if s.Exists {
						t.Fatalf("%v: %v after the network returned, the server holds %q (PTTL %v), want it absent (never re-created)", h, time.Since(healed), s.Value, s.PTTL)
					}
				}
			}
			for _, h := range short {
				if cmds := e.mentioning(h.Key, healed); len(cmds) != 0 {
					t.Errorf("%v: the watched client sent %d commands about it after the network returned, want none:%s", h, len(cmds), harness.Describe(cmds))
				}
			}
			afterReport := 0
			for _, h := range short {
				afterReport += len(e.mentioning(h.Key, evs[h.Key].At))
			}
			// A release through the library is owner-checked: the
			// intruder's lock survives it.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			relErr := intruder.Release(ctx)
			cancel()
			if relErr == nil {
				t.Errorf("%v: release after it was lost and taken: got nil, want an error (not held)", intruder)
			}
			if v, err := e.spy.Get(context.Background(), intruder.Key).Result(); err != nil || v != intruderValue {
				t.Errorf("intruder's %s after the lost holder's release: GET = (%q, %v), want %q", intruder.Key, v, err, intruderValue)
			}

			if n := len(e.Lost.All()); n != len(short) {
				t.Errorf("OnLost calls: got %d, want %d (the short locks only)", n, len(short))
			}
			st := e.WD.Stats()
			t.Logf("outage %v (measured %v): short locks reported ErrUnreachable %d/%d, late by %s after TTL since last confirmation; intruder set %v into the outage; commands about short keys after their report %d, after healing 0; long locks renewed again after healing: %s; renewals %s; after: %s; watchdog %+v; proxy %+v; worst lag %v; release of the taken lock: %v",
				outage, healed.Sub(down).Round(time.Millisecond), len(evs), len(short), describeDurations(short, lateness), intrudedAt.Sub(down).Round(time.Millisecond),
				afterReport, describeDurations(long, resumed), describeCounts(long, renewalsBefore, e.renewalsOf(long)), floor.summary(), st, e.proxy.Stats(), e.lag.Worst(), relErr)
			e.releaseAll(long)
		})
	}
}

// setLatency sets the proxy's latency in both directions.
func (e *env) setLatency(d time.Duration) {
	e.proxy.SetLatency(faultproxy.Upstream, d)
	e.proxy.SetLatency(faultproxy.Downstream, d)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestNetworkFaultsResets resets every connection between the watched
// client and the server (RST on both sides) six times, 250 ms apart, with
// 1 s and 2 s locks and 5 ms of latency each way so that resets may
// catch renewals in flight: go-redis reconnects, no lock leaves the server,
// none is reported lost, every lock is renewed after the last reset and
// keeps a third of its TTL. (The latency spans the resets only; see
// TestNetworkFaultsLatency about redsync's own timeouts.)
func TestNetworkFaultsResets(t *testing.T) {
	skipShort(t)
	for _, m := range clientModes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, envConfig{proxy: true, client: m.set})
			e.attach(watchdog.WithSchedule(schedule))
			const latency = 5 * time.Millisecond
			hs := e.obtainAll("resets", time.Second, 2*time.Second)
			e.setLatency(latency)
			e.watchFor(300*time.Millisecond, 2*latency, e.newHeldChecker(hs, true))

			before := e.WD.Stats()
			during := e.newHeldChecker(hs, false)
			var resets []int
			total := 0
			for i := 0; i < 6; i++ {
				n := e.proxy.Reset()
				resets = append(resets, n)
				total += n
				e.watchFor(250*time.Millisecond, 0, during)
			}
			last := time.Now()
			if total == 0 {
				t.Fatalf("resets: no connection was open at any of them, want some reset")
			}
			renewalsBefore := e.renewalsOf(hs)
			resumed := e.waitResumed(hs, last, 2*time.Second, e.newHeldChecker(hs, false))
			after := e.newHeldChecker(hs, true)
			e.watchFor(time.Second, 2*latency, after)
			renewalsAfter := e.renewalsOf(hs)
			for _, h := range hs {
				if renewalsAfter[h.Key] <= renewalsBefore[h.Key] {
					t.Errorf("%v: renewals %d at the last reset, %d a second later, want more", h, renewalsBefore[h.Key], renewalsAfter[h.Key])
				}
			}
			if evs := e.Lost.All(); len(evs) != 0 {
				t.Errorf("OnLost with connection resets: got %d calls (first: %s, %v), want none", len(evs), evs[0].Lock.Key, evs[0].Err)
			}
			st := e.WD.Stats()
			t.Logf("connections reset per round %v (%d in all); during: %s; renewed after the last reset: %s; renewals %s; after: %s; watchdog %+v (failures during the resets %d); proxy %+v; worst lag %v",
				resets, total, during.summary(), describeDurations(hs, resumed), describeCounts(hs, renewalsBefore, renewalsAfter), after.summary(), st, st.Failures-before.Failures, e.proxy.Stats(), e.lag.Worst())
			e.setLatency(0)
			e.releaseAll(hs)
		})
	}
}
