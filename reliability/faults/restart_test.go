package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/scripts"
	"github.com/lockwatch/lockwatch/watchdog"
)

// restartCase is one way of restarting the server.
type restartCase struct {
	kill  bool          // SIGKILL rather than SIGTERM
	pause time.Duration // how long the server stays down before it starts again
}

func (c restartCase) String() string {
	s := map[bool]string{false: "sigterm", true: "sigkill"}[c.kill]
	if c.pause > 0 {
		s += fmt.Sprintf("+down=%v", c.pause)
	}
	return s
}

// restart stops the server as c says and starts it again on the same port
// and directory; it returns when the server went down and when it answered
// again.
func (e *env) restart(c restartCase) (down, up time.Time) {
	e.t.Helper()
	down = time.Now()
	if c.kill {
		e.srv.Kill(e.t)
	} else {
		e.srv.Stop(e.t)
	}
	time.Sleep(c.pause)
	e.srv.Restart(e.t)
	return down, time.Now()
}

// TestRedisRestartWithoutPersistence holds six locks (1, 2 and 3 s, both
// libraries) on a redis-server without persistence and restarts it on the
// same port, at once or after 600 ms down (renewals fail meanwhile): every
// lock is reported lost exactly once and untracked, the registry is empty,
// no key comes back for two seconds, and the watched client sends nothing
// about them from 100 ms after their report on. A lock obtained after the
// restart is tracked and renewed (through the script's source: the server's
// script cache is empty).
//
// The reason is ErrLockGone when a renewal reaches the restarted server
// within the lock's TTL since its last confirmation; otherwise it is
// ErrUnreachable, which is accepted only when it came no earlier than that
// TTL and no renewal was confirmed after the restart. With 600 ms down this
// happens even to locks whose TTL outlasts the outage: after PoolSize
// failed dials, go-redis answers every dial with the last dial error and
// dials again only once a second, so the client stays cut off for up to a
// second after the server is back.
func TestRedisRestartWithoutPersistence(t *testing.T) {
	skipShort(t)
	for _, c := range []restartCase{{}, {pause: 600 * time.Millisecond}} {
		t.Run(c.String(), func(t *testing.T) { checkRestartWithoutPersistence(t, c) })
	}
}

func checkRestartWithoutPersistence(t *testing.T, c restartCase) {
	e := newEnv(t, envConfig{client: clientModes[0].set})
	e.attach(watchdog.WithSchedule(schedule))
	hs := e.obtainAll("restart", time.Second, 2*time.Second, 3*time.Second)
	e.watchFor(500*time.Millisecond, 0, e.newHeldChecker(hs, true))
	renewalsBefore := e.renewalsOf(hs)
	before := e.WD.Stats()

	down, up := e.restart(c)
	keys := harness.KeysOf(hs)
	evs := e.waitLost(keys, 4*time.Second)
	reasons := make(map[string]int)
	var lastReport time.Time
	reportedAfter := make(map[string]time.Duration)
	renewalsAtLoss := make(map[string]int64)
	for _, h := range hs {
		ev := evs[h.Key]
		renewalsAtLoss[h.Key] = ev.Lock.Renewals
		lastReport = later(lastReport, ev.At)
		reportedAfter[h.Key] = ev.At.Sub(up)
		switch {
		case errors.Is(ev.Err, watchdog.ErrLockGone):
			reasons["ErrLockGone"]++
		case errors.Is(ev.Err, watchdog.ErrUnreachable) && !errors.Is(ev.Err, watchdog.ErrLockGone) && !errors.Is(ev.Err, watchdog.ErrLockTaken) &&
			!ev.At.Before(ev.Lock.ConfirmedAt.Add(ev.Lock.TTL)) && ev.Lock.ConfirmedAt.Before(up):
			reasons["ErrUnreachable"]++
		default:
			t.Errorf("%v: OnLost reason %v %v after its last confirmation (the server was down from %v to %v after it), want ErrLockGone, or ErrUnreachable no earlier than its TTL",
				h, ev.Err, ev.At.Sub(ev.Lock.ConfirmedAt), down.Sub(ev.Lock.ConfirmedAt), up.Sub(ev.Lock.ConfirmedAt))
		}
		if ev.Lock.Value != h.Value {
			t.Errorf("%v: OnLost value %q, want %q", h, ev.Lock.Value, h.Value)
		}
		if n := len(e.Lost.ForKey(h.Key)); n != 1 {
			t.Errorf("%v: %d OnLost calls, want 1", h, n)
		}
	}
	if n := len(e.Reg.Locks()); n != 0 {
		t.Errorf("registry after every lock was reported lost: %d tracked, want 0", n)
	}
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		time.Sleep(sample)
		for k, s := range e.mustStates(keys) {
			if s.Exists {
				t.Fatalf("%s: %v after the restart the server holds %q (PTTL %v), want it absent (never re-created)", k, time.Since(up), s.Value, s.PTTL)
			}
		}
	}
	afterReport := 0
	for _, h := range hs {
		afterReport += len(e.mentioning(h.Key, evs[h.Key].At))
		if cmds := e.mentioning(h.Key, evs[h.Key].At); len(cmds) > 0 {
			t.Logf("%v reported lost at %s (%v); sent about it afterwards (allowed within 100 ms: a renewal that had passed the registry's check before the report):%s", h, evs[h.Key].At.Format("15:04:05.000000"), evs[h.Key].Err, harness.Describe(cmds))
		}
		if cmds := e.mentioning(h.Key, evs[h.Key].At.Add(100*time.Millisecond)); len(cmds) != 0 {
			t.Errorf("%v: the watched client sent %d commands about it from 100 ms after its report on, want none:%s", h, len(cmds), harness.Describe(cmds))
		}
	}

	// A new lock after the restart.
	fresh := e.obtainAll("restart:new", time.Second)
	for _, h := range fresh {
		if _, ok := e.Tracked(h.Key); !ok {
			t.Fatalf("%v obtained after the restart: untracked, want tracked", h)
		}
	}
	chk := e.newHeldChecker(fresh, true)
	e.watchFor(1500*time.Millisecond, 0, chk)
	renewed := e.renewalsOf(fresh)
	for _, h := range fresh {
		if renewed[h.Key] == 0 {
			t.Errorf("%v obtained after the restart: 0 renewals in 1.5 s, want some", h)
		}
	}
	st := e.WD.Stats()
	t.Logf("server down %v (%v, restart on the same port); renewal failures %d; reports %v, after the server was back by %s; renewals before the restart and at the report %s; commands about lost keys after their report %d; renew calls by source since the restart %d; new locks: renewals %v, %s; watchdog %+v; worst lag %v",
		up.Sub(down).Round(time.Millisecond), c, st.Failures-before.Failures, reasons, describeDurations(hs, reportedAfter), describeCounts(hs, renewalsBefore, renewalsAtLoss),
		afterReport, e.renewBySource(up), renewed, chk.summary(), st, e.lag.Worst())
	e.releaseAll(fresh)
}

// TestRedisRestartWithAppendOnly holds four locks (10 and 20 s, both
// libraries) on a redis-server with appendonly yes and appendfsync always
// and restarts it on the same port and directory, after SIGTERM, after
// SIGKILL, or after SIGKILL and 500 ms down (renewals fail meanwhile): the
// keys come back with their values, renewal resumes on its own
// (EVALSHA answers NOSCRIPT, so the watchdog sends the script's source,
// which loads it again), every lock keeps a third of its TTL once renewed,
// nothing is reported lost, and each lock is then released normally. The
// TTLs leave room for go-redis's dial back-off (see
// TestRedisRestartWithoutPersistence): a second on top of the outage.
func TestRedisRestartWithAppendOnly(t *testing.T) {
	skipShort(t)
	for _, c := range []restartCase{{}, {kill: true}, {kill: true, pause: 500 * time.Millisecond}} {
		t.Run(c.String(), func(t *testing.T) {
			// Socket timeouts of 10 s, not the 1 s of clientModes[0] nor
			// go-redis's default 3 s: with appendfsync always every write
			// waits for an fsync, and on a loaded machine's disk one took
			// over a second (CI, four test binaries at once), then over 3
			// s (CI runs 32 and 34, two CPU burners beside): an obtain
			// timed out before the test began. The restarts drop the
			// connections: no call waits that long for them.
			e := newEnv(t, envConfig{server: testredis.Options{AppendOnly: true}, client: func(o *redis.Options) {
				o.ReadTimeout, o.WriteTimeout = 10*time.Second, 10*time.Second
			}})
			e.attach(watchdog.WithSchedule(schedule))
			// TTLs of 10 and 20 s, not 3 and 6: with every write waiting
			// for an fsync, a busy disk held the server for over 3 s, and
			// a 3 s lock expired before its obtain returned (CI run 36).
			hs := e.obtainAll("aof", 10*time.Second, 20*time.Second)
			e.watchFor(500*time.Millisecond, 0, e.newHeldChecker(hs, true))
			renewalsBefore := e.renewalsOf(hs)

			before := e.WD.Stats()
			down, up := e.restart(c)
			downtime := up.Sub(down)
			keys := harness.KeysOf(hs)
			presence := e.newHeldChecker(hs, false)
			presence.check(e.mustStates(keys), 0)
			ctx := context.Background()
			resumed := e.waitResumed(hs, up, 3*time.Second, presence)
			// Counted from the stop: the first renewal may reach the new
			// server before the test's own PING sees it up.
			bySource := e.renewBySource(down)
			if bySource == 0 {
				t.Errorf("renew calls with the script's source since the restart: 0, want some (the answer to NOSCRIPT)")
			}
			if ok, err := e.spy.ScriptExists(ctx, scripts.RenewSHA1).Result(); err != nil || len(ok) != 1 || !ok[0] {
				t.Errorf("SCRIPT EXISTS %s after renewals resumed = (%v, %v), want [true]", scripts.RenewSHA1, ok, err)
			}
			chk := e.newHeldChecker(hs, true)
			e.watchFor(2*time.Second, 0, chk)
			renewalsAfter := e.renewalsOf(hs)
			for _, h := range hs {
				if renewalsAfter[h.Key] <= renewalsBefore[h.Key] {
					t.Errorf("%v: renewals %d before the restart, %d after, want more", h, renewalsBefore[h.Key], renewalsAfter[h.Key])
				}
			}
			if evs := e.Lost.All(); len(evs) != 0 {
				var b strings.Builder
				for _, ev := range evs {
					fmt.Fprintf(&b, " %s: %v;", ev.Lock.Key, ev.Err)
				}
				t.Errorf("OnLost across a restart with appendonly: got %d calls (%s), want none", len(evs), b.String())
			}
			st := e.WD.Stats()
			t.Logf("server down %v (%v, restart on the same port and directory); renewal failures while down %d; renewals resumed after it was back by %s; renew calls by source since %d; renewals %s; after: %s; watchdog %+v; worst lag %v",
				downtime.Round(time.Millisecond), c, st.Failures-before.Failures, describeDurations(hs, resumed), bySource, describeCounts(hs, renewalsBefore, renewalsAfter), chk.summary(), st, e.lag.Worst())
			e.releaseAll(hs)
		})
	}
}
