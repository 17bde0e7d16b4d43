package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// lib is an upstream lock library as the application uses it.
type lib struct {
	name string
	// obtain locks key for ttl through c; it returns the value stored
	// and the holder's release.
	obtain func(t *testing.T, c *redis.Client, key string) (value string, release func() error)
}

var libs = []lib{
	{"redislock", func(t *testing.T, c *redis.Client, key string) (string, func() error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := redislock.New(c).Obtain(ctx, key, ttl, nil)
		if err != nil {
			t.Fatalf("redislock Obtain(%q, %v): %v", key, ttl, err)
		}
		return l.Token() + l.Metadata(), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return l.Release(ctx)
		}
	}},
	{"redsync", func(t *testing.T, c *redis.Client, key string) (string, func() error) {
		t.Helper()
		m := newMutex([]*redis.Client{c}, key, ttl, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.LockContext(ctx); err != nil {
			t.Fatalf("redsync Lock(%q, %v): %v", key, ttl, err)
		}
		return m.Value(), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: Unlock answered false")
			}
			return err
		}
	}},
}

// causeEnv is one lock on one real server, held by an application whose
// OnLost blocks for 3 s, and the context Watchdog.Context gave for it.
type causeEnv struct {
	t       *testing.T
	a       *app
	s       *server
	key     string
	value   string
	release func() error
	f       *followed
	// obtaining and obtained: just before the obtain was sent, and when it
	// returned (the hook saw it in between).
	obtaining, obtained time.Time
}

// causeCase is an event that ends the lock, and the cause the context
// must be cancelled with, within bound of the event (0: by the time the
// event's call returns).
type causeCase struct {
	name  string
	want  error
	bound time.Duration
	lost  bool // a loss: OnLost gets the same error
	// early: the context is told first that the lock may be lost
	// (ErrUnconfirmed, I15); OnLost's reason, checked by lostWith, comes
	// once it is given up.
	early    bool
	lostWith func(e *causeEnv, err error) string
	event    func(e *causeEnv)
	check    func(e *causeEnv, cause error) string // more about the cause; "" when fine
	after    func(e *causeEnv)                     // checks once the context ended
}

// onLostBlock is how long OnLost blocks in these scenarios: the context
// must not wait for it.
const onLostBlock = 3 * time.Second

var causeCases = []causeCase{
	{
		name: "deleted", want: watchdog.ErrLockGone, bound: renewalPeriod + slack, lost: true,
		event: func(e *causeEnv) { intrude(e, e.s.spy.Del(context.Background(), e.key).Err()) },
	},
	{
		name: "stolen", want: watchdog.ErrLockTaken, bound: renewalPeriod + slack, lost: true,
		event: func(e *causeEnv) {
			intrude(e, e.s.spy.Set(context.Background(), e.key, "thief", 10*time.Second).Err())
		},
		after: func(e *causeEnv) {
			// Since the loss, taken before the read: a read that returns
			// late (beside two burners) must not shrink the bound.
			since := time.Since(e.f.doneAt)
			if o := read(e.s.spy, e.key); o.Value != "thief" || o.PTTL > 10*time.Second-since {
				e.t.Errorf("after the loss the key holds %q with PTTL %v, want the thief's value, never renewed", o.Value, o.PTTL)
			}
		},
	},
	{
		name: "unreachable: server SIGSTOPped", want: watchdog.ErrUnconfirmed, bound: ttl + slack, lost: true, early: true,
		event: func(e *causeEnv) {
			e.t.Cleanup(func() { e.s.srv.Resume(e.t) }) // before the watchdog stops
			e.s.srv.Pause(e.t)
		},
		check: func(e *causeEnv, cause error) string { return unconfirmedAt(e.s)(cause) },
		lostWith: func(e *causeEnv, err error) string {
			var to interface{ Timeout() bool }
			if !errors.As(err, &to) || !to.Timeout() {
				return "it wraps no timeout (an error whose Timeout() is true), want the renewal's timeout"
			}
			return unreachableAt(e.s)(err)
		},
	},
	{
		name: "unreachable: server killed", want: watchdog.ErrUnconfirmed, bound: ttl + slack, lost: true, early: true,
		event: func(e *causeEnv) { e.s.srv.Kill(e.t) },
		check: func(e *causeEnv, cause error) string { return unconfirmedAt(e.s)(cause) },
		lostWith: func(e *causeEnv, err error) string {
			return unreachableFrom(e.s)(err)
		},
	},
	{
		name: "released", want: watchdog.ErrReleased, bound: 0,
		event: func(e *causeEnv) {
			if err := e.release(); err != nil {
				e.t.Fatalf("the holder's release: %v", err)
			}
		},
		after: func(e *causeEnv) {
			if o := read(e.s.spy, e.key); o.Exists {
				e.t.Errorf("after the release the key holds %q (PTTL %v), want it deleted", o.Value, o.PTTL)
			}
		},
	},
	{
		name: "watchdog stopped", want: watchdog.ErrStopped, bound: 0,
		event: func(e *causeEnv) { e.a.WD.Stop() },
		after: func(e *causeEnv) {
			// Nothing renews the lock any more: it expires within its TTL.
			if gone := waitGone(e.s, e.key, ttl+slack+e.a.lateBy(e.f.doneAt)); !gone {
				e.t.Errorf("the key still exists a TTL after the watchdog stopped, want it expired (nothing renews it)")
			}
		},
	},
}

func intrude(e *causeEnv, err error) {
	if err != nil {
		e.t.Fatalf("intruder on %v: %v", e.s, err)
	}
}

// waitGone waits until key no longer exists on s, or within passes.
func waitGone(s *server, key string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		if o := read(s.spy, key); o.Err == nil && !o.Exists {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestContextCauses: for a redislock lock and a redsync mutex (one pool),
// TTL 1 s, on a real server, with an OnLost that blocks for 3 s, the
// context Watchdog.Context gives is cancelled within its bound of the event
// that ends the lock, with context.Cause telling why:
//
//   - deleted by an intruder: ErrLockGone, within a renewal period;
//   - stolen (SET to another value): ErrLockTaken, within a renewal period,
//     and the thief's key is never renewed;
//   - unreachable, server SIGSTOPped: ErrUnreachable, within a TTL, an
//     *UnreachableError naming the server and wrapping a timeout;
//   - unreachable, server SIGKILLed: the same, wrapping ECONNREFUSED;
//   - released by the holder: ErrReleased, by the time the release returns;
//   - watchdog stopped: ErrStopped, by the time Stop returns, and the key
//     then expires within its TTL;
//   - max hold (WithMaxHold(1s)): ErrMaxHold, a second after the obtain, and
//     the key then expires within its TTL;
//   - never tracked: ErrNotTracked at once, for a key never obtained, one
//     held through an unwatched client, one released;
//   - a slow OnLost: see runSlowOnLost.
//
// For a loss, OnLost gets the very error the context's cause is, and the
// context is already cancelled when OnLost is called. Until the event the
// context lives and the key's PTTL is at least a third of the TTL.
func TestContextCauses(t *testing.T) {
	t.Parallel()
	lag := lagmeter.Start(t)
	var names []string
	for _, l := range libs {
		names = append(names, l.name)
	}
	sideBySide(t, names, func(t *testing.T, li int) {
		l := libs[li]
		var cases []string
		for _, c := range causeCases {
			cases = append(cases, c.name)
		}
		cases = append(cases, "max hold", "never tracked", "slow OnLost")
		sideBySide(t, cases, func(t *testing.T, ci int) {
			switch {
			case ci < len(causeCases):
				runCause(t, lag, l, causeCases[ci])
			case cases[ci] == "max hold":
				runMaxHold(t, lag, l)
			case cases[ci] == "never tracked":
				runNotTracked(t, lag, l)
			default:
				runSlowOnLost(t, lag, l)
			}
		})
	})
}

func newCauseEnv(t *testing.T, lag *lagmeter.Meter, l lib, name string, opts ...watchdog.Option) *causeEnv {
	t.Helper()
	ss := startServers(t, 1)
	e := &causeEnv{t: t, s: ss[0], key: fmt.Sprintf("ctx:%s:%s", l.name, name)}
	e.a = newApp(t, ss, lag, appConfig{onLostBlock: onLostBlock, opts: opts})
	e.obtaining = time.Now()
	e.value, e.release = l.obtain(t, e.s.c, e.key)
	e.obtained = time.Now()
	e.f = e.a.follow(e.key)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s; %s", e.f.describe(e.a), e.a.lost.describe(e.a))
		}
	})
	return e
}

func runCause(t *testing.T, lag *lagmeter.Meter, l lib, c causeCase) {
	e := newCauseEnv(t, lag, l, c.name)
	a, f := e.a, e.f
	time.Sleep(ttl + ttl/2)
	if f.ended() {
		t.Fatalf("the context ended before anything happened: %s", f.describe(a))
	}
	if o := read(e.s.spy, e.key); !o.Exists || o.Value != e.value || o.PTTL < floor {
		t.Fatalf("1.5 TTLs after the obtain the key reads exists=%v value=%q PTTL %v (%v), want the holder's value with at least TTL/3 (renewed)", o.Exists, o.Value, o.PTTL, o.Err)
	}
	at := time.Now()
	c.event(e)
	returned := time.Now()
	if c.bound == 0 && !f.ended() {
		t.Errorf("the context was not cancelled by the time the %s call returned (it took %v), want it cancelled by then", c.name, returned.Sub(at))
	}
	if !f.wait(c.bound + a.lateBy(at) + 2*time.Second) {
		t.Fatalf("the context was not cancelled within %v of the event (%s), want within %v", c.bound+2*time.Second, c.name, c.bound)
	}
	// With bound 0 the context must be cancelled when the call returns,
	// checked above through ctx.Err(); doneAt, set by a goroutine that
	// waits for ctx.Done(), is that goroutine's wake-up, which under
	// -race beside two burners came 29 ms after the event for a release
	// that returned within 6 ms, the context already cancelled.
	took := f.doneAt.Sub(at)
	limit := c.bound + a.lateBy(at)
	if c.bound > 0 && took > limit {
		t.Errorf("the context was cancelled %v after the event, want within %v (bound %v; this process woken late by up to %v)", took.Round(time.Millisecond), limit.Round(time.Millisecond), c.bound, a.lateBy(at))
	}
	if !errors.Is(f.cause, c.want) {
		t.Errorf("context.Cause = %v, want %v; chain:%s", f.cause, c.want, testredis.ErrChain(f.cause))
	}
	if c.check != nil {
		if msg := c.check(e, f.cause); msg != "" {
			t.Errorf("context.Cause = %v: %s; chain:%s", f.cause, msg, testredis.ErrChain(f.cause))
		}
	}
	switch {
	case c.early:
		wantLostAfterTold(t, e, f.cause, c.lostWith)
	case c.lost:
		wantLostAsCancelled(t, a, e.key, f.cause, "the context's cancellation")
	}
	time.Sleep(ttl / 2)
	want := int64(0)
	if c.lost {
		want = 1
	}
	// OnLost blocks: Stats counts the reports, not the calls.
	if st := a.WD.Stats(); st.Lost != want {
		t.Errorf("Stats.Lost = %d half a TTL after the context's cancellation, want %d", st.Lost, want)
	}
	if c.after != nil {
		c.after(e)
	}
	if !t.Failed() {
		t.Logf("context cancelled %v after the event (bound %v) with %v", took.Round(time.Millisecond), c.bound, f.cause)
	}
}

// runMaxHold: under WithMaxHold(1s), the context is cancelled with
// ErrMaxHold a second after the obtain (not before), OnLost gets the same
// error after, and the key expires within its TTL (I6).
func runMaxHold(t *testing.T, lag *lagmeter.Meter, l lib) {
	const maxHold = time.Second
	e := newCauseEnv(t, lag, l, "max-hold", watchdog.WithMaxHold(maxHold))
	a, f := e.a, e.f
	if !f.wait(maxHold + slack + 2*time.Second) {
		t.Fatalf("the context was not cancelled within %v of the obtain under WithMaxHold(%v)", maxHold+slack+2*time.Second, maxHold)
	}
	if errors.Is(f.cause, watchdog.ErrUnconfirmed) && a.WD.Stats().Unconfirmed > 0 {
		// No renewal was confirmed in time before the max hold: the job
		// was told so then, as it must be (I15), and the context's cause
		// cannot be the max hold (CI run 132, the newest Go beside the
		// race step and two CPU burners: renewals of the 1 s lock went
		// unanswered for 162 and 246 ms, and the job was told at 851 ms).
		// The max hold is judged by the report: OnLost, after the
		// cancellation, with ErrMaxHold.
		t.Logf("NOT JUDGED (the context's cause): the job was told %v after the obtain that no renewal was confirmed in time (%v), before the max hold%s",
			f.doneAt.Sub(e.obtaining).Round(time.Millisecond), f.cause, lag.Note(maxHold))
		evs := a.lost.waitFor(e.key, maxHold+2*time.Second)
		switch {
		case len(evs) == 0:
			t.Errorf("OnLost not called within %v of the context's cancellation, want it called with ErrMaxHold", maxHold+2*time.Second)
		case !errors.Is(evs[0].Err, watchdog.ErrMaxHold):
			t.Errorf("OnLost got %v, want ErrMaxHold (the max hold, reached after the job was told)", evs[0].Err)
		}
		if !waitGone(e.s, e.key, ttl+slack+a.lateBy(f.doneAt)) {
			t.Errorf("the key still exists a TTL after the max hold, want it expired (no renewal past max hold)")
		}
		return
	}
	// The max hold counts from when the hook saw the obtain: after it was
	// sent, before it returned. (Counted from before the test's server
	// started, CI run 31 under load read 1.342 s against a bound of 1.329
	// s: the start took a quarter of a second.)
	if took := f.doneAt.Sub(e.obtaining); took < maxHold-50*time.Millisecond {
		t.Errorf("the context was cancelled %v after the obtain was sent, before the max hold (%v)", took.Round(time.Millisecond), maxHold)
	}
	if took, limit := f.doneAt.Sub(e.obtained), maxHold+slack+a.lateBy(e.obtained); took > limit {
		t.Errorf("the context was cancelled %v after the obtain returned, want within %v", took.Round(time.Millisecond), limit.Round(time.Millisecond))
	}
	if !errors.Is(f.cause, watchdog.ErrMaxHold) {
		t.Errorf("context.Cause = %v, want ErrMaxHold", f.cause)
	}
	wantLostAsCancelled(t, a, e.key, f.cause, "the max hold")
	if !waitGone(e.s, e.key, ttl+slack+a.lateBy(f.doneAt)) {
		t.Errorf("the key still exists a TTL after the max hold, want it expired (no renewal past max hold)")
	}
	if !t.Failed() {
		t.Logf("context cancelled %v after the obtain returned with %v; key expired within a TTL", f.doneAt.Sub(e.obtained).Round(time.Millisecond), f.cause)
	}
}

// runNotTracked: Context for a key no tracked lock has is cancelled at once
// (before Context returns) with ErrNotTracked: a key never obtained, a key
// held through a client nobody watches, a key released by its holder. A
// key held through the watched client gets a live context.
func runNotTracked(t *testing.T, lag *lagmeter.Meter, l lib) {
	e := newCauseEnv(t, lag, l, "tracked")
	ask := func(key, what string, want error) {
		t.Helper()
		ctx, cancel := e.a.WD.Context(context.Background(), key)
		defer cancel()
		cause := context.Cause(ctx)
		switch {
		case want == nil && cause != nil:
			t.Errorf("Context(%s): cancelled at once with %v, want a live context", what, cause)
		case want != nil && !errors.Is(cause, want):
			t.Errorf("Context(%s): cause %v right after it returned, want %v at once", what, cause, want)
		}
	}
	ask("ctx:"+l.name+":never", "a key never obtained", watchdog.ErrNotTracked)
	unwatched := "ctx:" + l.name + ":unwatched"
	_, rel := l.obtain(t, e.s.spy, unwatched)
	ask(unwatched, "a key held through an unwatched client", watchdog.ErrNotTracked)
	_ = rel()
	ask(e.key, "a key held through the watched client", nil)
	if err := e.release(); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
	ask(e.key, "a key its holder released", watchdog.ErrNotTracked)
	if !e.f.ended() || !e.f.wait(time.Second) || !errors.Is(e.f.cause, watchdog.ErrReleased) {
		t.Errorf("the context asked while the key was held: %s, want cancelled with ErrReleased", e.f.describe(e.a))
	}
}

// runSlowOnLost: OnLost blocks for 3 s. Two locks A and B; A is deleted,
// its context is cancelled and OnLost(A) starts and blocks; B is deleted
// while OnLost(A) still blocks: B's context is cancelled within a renewal
// period all the same. OnLost(B) is called only after OnLost(A) returned
// (one at a time, in order), and each context was cancelled before its
// OnLost call.
func runSlowOnLost(t *testing.T, lag *lagmeter.Meter, l lib) {
	harness.SkipShort(t, "waits for a 3 s OnLost")
	e := newCauseEnv(t, lag, l, "slow-onlost-A")
	a := e.a
	keyB := "ctx:" + l.name + ":slow-onlost-B"
	l.obtain(t, e.s.c, keyB)
	fA, fB := e.f, a.follow(keyB)
	time.Sleep(ttl / 2)
	bound := renewalPeriod + slack

	atA := time.Now()
	intrude(e, e.s.spy.Del(context.Background(), e.key).Err())
	if !fA.wait(bound + a.lateBy(atA) + 2*time.Second) {
		t.Fatalf("A's context not cancelled within 2s of A's deletion")
	}
	if evs := a.lost.waitFor(e.key, 2*time.Second); len(evs) == 0 {
		t.Fatalf("OnLost(A) not called within 2s of A's context's cancellation")
	}
	atB := time.Now()
	intrude(e, e.s.spy.Del(context.Background(), keyB).Err())
	if !fB.wait(bound + a.lateBy(atB) + 2*time.Second) {
		t.Fatalf("B's context not cancelled within 2s of B's deletion, while OnLost(A) blocks")
	}
	rets := a.lost.returns()
	if len(rets) > 0 && rets[0].Before(fB.doneAt) {
		t.Errorf("OnLost(A) returned at %s, before B's context was cancelled at %s: the scenario did not test a blocked OnLost", a.rel(rets[0]), a.rel(fB.doneAt))
	}
	for _, c := range []struct {
		name string
		f    *followed
		at   time.Time
	}{{"A", fA, atA}, {"B", fB, atB}} {
		if took, limit := c.f.doneAt.Sub(c.at), bound+a.lateBy(c.at); took > limit {
			t.Errorf("%s's context was cancelled %v after its deletion, want within %v while OnLost blocks", c.name, took.Round(time.Millisecond), limit.Round(time.Millisecond))
		}
		if !errors.Is(c.f.cause, watchdog.ErrLockGone) {
			t.Errorf("%s's context.Cause = %v, want ErrLockGone", c.name, c.f.cause)
		}
	}
	evsB := a.lost.waitFor(keyB, onLostBlock+2*time.Second)
	rets = a.lost.returns()
	switch {
	case len(evsB) == 0:
		t.Errorf("OnLost(B) not called within %v of B's context's cancellation", onLostBlock+2*time.Second)
	case len(rets) == 0 || evsB[0].At.Before(rets[0]):
		t.Errorf("OnLost(B) called at %s while OnLost(A) had not returned, want one call at a time", a.rel(evsB[0].At))
	case evsB[0].ctxDone != 1:
		t.Errorf("OnLost(B) was called before B's context was cancelled")
	}
	if !t.Failed() {
		t.Logf("A's context cancelled %v after its deletion; B's %v after its deletion, while OnLost(A) blocked (it returned at %s); OnLost(B) at %s",
			fA.doneAt.Sub(atA).Round(time.Millisecond), fB.doneAt.Sub(atB).Round(time.Millisecond), a.rel(rets[0]), a.rel(evsB[0].At))
	}
}

// wantLostAsCancelled checks that OnLost reported key within 2 s of when,
// with cause, the error key's followed context was cancelled with, and
// after that context had ended.
// wantLostAfterTold checks OnLost's report of a lock whose context was
// told early (cause, an ErrUnconfirmed): it comes after the context was
// cancelled, with a reason check accepts.
func wantLostAfterTold(t *testing.T, e *causeEnv, cause error, check func(e *causeEnv, err error) string) {
	t.Helper()
	evs := e.a.lost.waitFor(e.key, 2*time.Second)
	switch {
	case len(evs) == 0:
		t.Errorf("OnLost not called within 2s of the context's cancellation (%v), want it called", cause)
	case evs[0].ctxDone != 1:
		t.Errorf("OnLost was called before the context was cancelled, want the context told first")
	case !errors.Is(evs[0].Err, watchdog.ErrUnreachable) || !errors.Is(evs[0].Err, watchdog.ErrLost):
		t.Errorf("OnLost got %v, want ErrUnreachable (an ErrLost)", evs[0].Err)
	default:
		if msg := check(e, evs[0].Err); msg != "" {
			t.Errorf("OnLost got %v: %s; chain:%s", evs[0].Err, msg, testredis.ErrChain(evs[0].Err))
		}
	}
}

func wantLostAsCancelled(t *testing.T, a *app, key string, cause error, when string) {
	t.Helper()
	evs := a.lost.waitFor(key, 2*time.Second)
	switch {
	case len(evs) == 0:
		t.Errorf("OnLost not called within 2s of %s, want it called with the context's cause (%v)", when, cause)
	case evs[0].Err != cause:
		t.Errorf("OnLost got %v, the context's cause is %v: want the same error", evs[0].Err, cause)
	case evs[0].ctxDone != 1:
		t.Errorf("OnLost was called before the context was cancelled, want the context cancelled first")
	}
}
