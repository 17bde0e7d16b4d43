package watchdog_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

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
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		net := &jitterThenCut{} // no jitter: only the cut
		e.rdb.AddHook(net)
		wd := attach(t, e.reg)
		defer wd.Stop()
		const ttl = 300 * time.Millisecond
		e.obtain(t, "busy", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "busy")
		defer cancel()
		time.Sleep(150 * time.Millisecond)
		refreshAcrossCut(t, e, net, ctx, ttl, time.Second)
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
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		net := &jitterThenCut{}
		e.rdb.AddHook(net)
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"))
		defer wd.Stop()
		const ttl = 6 * time.Second
		e.obtain(t, "busy", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "busy")
		defer cancel()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if st := wd.Stats(); st.Renewals == 0 || st.FastLane != 0 {
			t.Fatalf("by the cut: stats %+v; want the lock renewed by a sweep, and not in the fast lane (the case this test is for)", st)
		}
		refreshAcrossCut(t, e, net, ctx, ttl, 10*time.Second)
	})
}

// refreshAcrossCut cuts net now and sends the holder's refresh of "busy"
// (held with "me" for ttl, followed by ctx) with a timeout of wait, and
// wants ctx cancelled by E - d at the latest: the last renewal Redis
// confirmed was sent before the cut, so E is at most a TTL after it.
func refreshAcrossCut(t *testing.T, e *env, net *jitterThenCut, ctx context.Context, ttl, wait time.Duration) {
	t.Helper()
	var toldAt atomic.Int64
	context.AfterFunc(ctx, func() { toldAt.Store(time.Now().UnixNano()) })
	cut := time.Now()
	net.cut.Store(cut.UnixNano())
	refreshed := make(chan error, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(context.Background(), wait)
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
}

// slowRelease is a network before the watched client on which, from cut
// on, the watchdog's renew calls fail at once (a reset connection) and
// the holder's release takes delay to arrive, then lands.
type slowRelease struct {
	cut   atomic.Int64 // unix ns; 0: not yet
	delay time.Duration
}

func (s *slowRelease) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *slowRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[1] == releaseScript {
			time.Sleep(s.delay)
		} else if renewCmd(cmd) && s.cutNow() {
			cmd.SetErr(errReset)
			return errReset
		}
		return next(ctx, cmd)
	}
}

func (s *slowRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, renewCmd) && s.cutNow() {
			for _, c := range cmds {
				c.SetErr(errReset)
			}
			return errReset
		}
		return next(ctx, cmds)
	}
}

func (s *slowRelease) cutNow() bool {
	c := s.cut.Load()
	return c != 0 && time.Now().UnixNano() >= c
}

// A holder whose release is on its way when its lock's tell time passes
// is not told the lock was not confirmed: its job has ended, and the
// release decides. Here the release lands before the key expires, so the
// holder's context ends as released. Local CI run 173 failed this way
// (TestContextCauses, a release on its way when a loaded machine's first
// pass came late) with a tell that did not tell a refresh from a release.
func TestReleaseOnItsWayNotTold(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		const (
			ttl    = 300 * time.Millisecond
			sendAt = 160 * time.Millisecond
		)
		// The release lands 3 ms before the key could expire: after the
		// lock's tell time, E - d (5 ms) less the tell margin (at least
		// 1 ms), virtual time running nothing late.
		net := &slowRelease{delay: ttl - sendAt - 3*time.Millisecond}
		e.rdb.AddHook(net)
		wd := attach(t, e.reg)
		defer wd.Stop()
		e.obtain(t, "rel", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "rel")
		defer cancel()
		net.cut.Store(time.Now().UnixNano()) // no renewal is confirmed from now on
		time.Sleep(sendAt)
		sent := time.Now()
		n, err := e.rdb.Eval(context.Background(), releaseScript, []string{"rel"}, "me").Int()
		if err != nil || n != 1 {
			t.Fatalf("release = %d, %v after %v; want 1 (the key deleted), nil", n, err, time.Since(sent))
		}
		synctest.Wait()
		if c := context.Cause(ctx); !errors.Is(c, watchdog.ErrReleased) {
			t.Errorf("cause %v, want ErrReleased: the holder released its lock, and its release was on its way at the tell time", c)
		}
		if st := wd.Stats(); st.Unconfirmed != 0 {
			t.Errorf("Stats().Unconfirmed = %d, want 0 (nobody told)", st.Unconfirmed)
		}
	})
}

// slowRefresh is a network before the watched client on which the
// holder's refresh takes delay to arrive; nothing else is held up.
type slowRefresh struct{ delay time.Duration }

func (s slowRefresh) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s slowRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[1] == refreshScript {
			time.Sleep(s.delay)
		}
		return next(ctx, cmd)
	}
}

func (s slowRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A long lock whose holder's refresh is on its way during a sweep, and
// lands a moment later, is renewed by the sweeps after it as before: the
// slot the sweep gives it so that its holder is told in time (should the
// refresh hang) must not keep the ticks from renewing it until its tell
// time. A lock of 6 s under "@every 1s", a refresh sent 10 ms before the
// tick at 1 s and 20 ms on its way; the key's PTTL, read every 100 ms,
// must stay above a third of the TTL (I2), no deadline missed. (The
// refresh, once applied, moves the slot to its new renewal time, and
// that visit leaves the lock to the ticks: this guards that path.)
func TestRefreshDuringSweepKeepsRenewals(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(slowRefresh{delay: 20 * time.Millisecond})
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"))
		defer wd.Stop()
		const ttl = 6 * time.Second
		start := time.Now()
		e.obtain(t, "k", "me", ttl)
		time.Sleep(time.Until(start.Add(990 * time.Millisecond)))
		if n, err := e.rdb.Eval(context.Background(), refreshScript, []string{"k"}, "me", ttl.Milliseconds()).Int(); err != nil || n != 1 {
			t.Fatalf("refresh = %d, %v; want 1, nil", n, err)
		}
		least := ttl
		for time.Since(start) < 3*ttl {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			least = min(least, e.pttl("k"))
		}
		if st := wd.Stats(); least < ttl/3 || st.DeadlinesMissed != 0 {
			t.Errorf("over three TTLs: least PTTL %v, deadlines missed %d; want at least %v and none (renewed on every tick)", least, st.DeadlinesMissed, ttl/3)
		}
		e.release(t, "k", "me")
	})
}
