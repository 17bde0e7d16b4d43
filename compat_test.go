package lockwatch_test

// The end-to-end suite: the real upstream libraries (bsm/redislock and
// go-redsync/redsync), business code as it is written without lockwatch, the
// start-up contract of DESIGN.md, and every invariant I1–I8 checked for both
// libraries.
//
// Two environments:
//
//   - miniredis inside a testing/synctest bubble (TestI*): the clients dial
//     miniredis in memory, miniredis's TTLs follow the bubble's fake clock
//     (ClockTTL), and time.Sleep advances that clock deterministically, so a
//     simulated hour takes seconds.
//   - a real redis-server in real time (TestReal*), started per test by
//     internal/testkit/testredis, with TTLs of 100–300 ms. They skip without
//     redis-server unless LOCKWATCH_REQUIRE_REDIS=1.
//
// Observations go through a "spy" client that no registry watches, so that
// looking never changes what the registry sees.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

func TestMain(m *testing.M) {
	testredis.VerifyTestMain(m)
}

// defaultEvery is the interval of watchdog.DefaultSchedule ("@every 10s").
const defaultEvery = 10 * time.Second

// realSlack is the timing tolerance of the real-server tests: scheduling,
// the race detector and a loopback round trip.
const realSlack = 25 * time.Millisecond

// period is an upper bound of one renewal period of a lock with ttl under a
// schedule ticking every `every`: ticks come every `every`, and a lock that
// keeps a third of its TTL (I2) is renewed at least every 2/3 of its TTL.
func period(ttl, every time.Duration) time.Duration {
	return min(every, 2*ttl/3)
}

// ---------------------------------------------------------------------------
// Bubbles.

// stallLimit is how long, in real time, a simulated scenario may go without
// observing anything before bubble declares it stuck.
const stallLimit = time.Minute

// progressOf maps the *testing.T of a running bubble to its progress counter.
var progressOf sync.Map

// bubble runs f in a synctest bubble, like synctest.Test, with a guard
// outside the bubble: a livelock inside it (a goroutine that spins without
// letting the fake clock advance) would otherwise hang the test binary until
// its timeout. If the scenario observes nothing (env.state, waitLost) for
// stallLimit of real time, the guard crashes the binary with every
// goroutine's stack.
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	var progress atomic.Int64
	stop := make(chan struct{})
	guardDone := make(chan struct{})
	go func() {
		defer close(guardDone)
		seen, since := progress.Load(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if n := progress.Load(); n != seen {
				seen, since = n, time.Now()
				continue
			}
			if time.Since(since) > stallLimit {
				debug.SetTraceback("all")
				panic(fmt.Sprintf("%s: the simulated scenario observed nothing for %v of real time: livelock in the bubble? (goroutine stacks follow)", t.Name(), stallLimit))
			}
		}
	}()
	defer func() {
		close(stop)
		<-guardDone
	}()
	synctest.Test(t, func(t *testing.T) {
		progressOf.Store(t, &progress)
		defer progressOf.Delete(t)
		f(t)
	})
}

// attached runs f in a bubble (see bubble) with a fresh miniredis env (see
// newMiniEnv) and a watchdog attached with opts.
func attached(t *testing.T, opts []watchdog.Option, f func(t *testing.T, e *env)) {
	t.Helper()
	bubble(t, func(t *testing.T) {
		e := newMiniEnv(t)
		e.attach(opts...)
		f(t, e)
	})
}

// tick records progress for bubble's stall guard.
func (e *env) tick() {
	if e.progress != nil {
		e.progress.Add(1)
	}
}

// ---------------------------------------------------------------------------
// The two libraries, used the way business code uses them: harness.Libs,
// harness.Obtain, harness.Held.

var libs = harness.Libs

// ---------------------------------------------------------------------------
// Environments.

// env is one Redis (miniredis in a bubble, or a real server), three clients
// and, once attach is called, the application (the embedded harness.App): a
// registry watching app and app2 and an attached watchdog.
type env struct {
	*harness.App
	t     testing.TB
	mini  *miniredis.Miniredis // nil on a real server
	addr  string               // real server only
	app   *redis.Client        // the application's client; watched after attach
	app2  *redis.Client        // another client of the application; watched after attach
	spy   *redis.Client        // never watched: observer, contender, intruder
	slack time.Duration        // timing tolerance
	lag   *lagmeter.Meter      // real time only: how late this process wakes up
	pings *lagmeter.Meter      // real server only: how late a PING of it returns
	// progress counts observations in a bubble, for bubble's stall guard.
	progress *atomic.Int64

	rec *harness.SentLog // every command sent through app, after attach
}

// newMiniEnv returns an environment on a fresh miniredis. It must be called
// inside a synctest bubble: miniredis is dialled in memory and its TTLs run
// on the bubble's clock. Everything is closed in t.Cleanup, inside the
// bubble.
func newMiniEnv(t testing.TB) *env {
	t.Helper()
	return newMiniEnvWith(t, nil)
}

// newMiniEnvWith is newMiniEnv with client options changed by opt (if not nil).
func newMiniEnvWith(t testing.TB, opt func(*redis.Options)) *env {
	t.Helper()
	p, _ := progressOf.Load(t)
	if p == nil {
		t.Fatalf("newMiniEnv outside bubble(): got no progress counter, want one")
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	t.Cleanup(m.Close)
	client := func() *redis.Client {
		// memconn: in-memory connections that survive pipelines larger than
		// net.Pipe takes at once, and an IP-literal Addr, so that newer
		// go-redis releases look up no host name inside the bubble.
		o := &redis.Options{Addr: memconn.Addr, Dialer: memconn.Dialer(m)}
		if opt != nil {
			opt(o)
		}
		return redis.NewClient(o)
	}
	e := &env{t: t, mini: m, app: client(), app2: client(), spy: client(), slack: time.Millisecond, progress: p.(*atomic.Int64)}
	t.Cleanup(e.closeClients)
	return e
}

// newRealEnv returns an environment on a redis-server of its own, or skips
// t when there is none (see testredis.Start).
func newRealEnv(t testing.TB) *env {
	t.Helper()
	srv := testredis.Start(t)
	client := func() *redis.Client { return redis.NewClient(&redis.Options{Addr: srv.Addr}) }
	e := &env{t: t, addr: srv.Addr, app: client(), app2: client(), spy: client(), slack: realSlack}
	t.Cleanup(e.closeClients)
	e.lag = lagmeter.Start(t)
	if err := e.spy.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING %s: got %v, want nil", srv.Addr, err)
	}
	pinger := client()
	t.Cleanup(func() { _ = pinger.Close() })
	e.pings = lagmeter.StartProbe(t, 5*time.Millisecond, func() { _ = pinger.Ping(context.Background()).Err() })
	return e
}

// periods scales a number of renewal periods to watch: real time is
// expensive, simulated time is not.
func (e *env) periods(n int) time.Duration {
	if e.mini == nil {
		n = max(n/3, 2)
	}
	return time.Duration(n)
}

func (e *env) closeClients() {
	for _, c := range []*redis.Client{e.app, e.app2, e.spy} {
		_ = c.Close()
	}
}

// attach follows the start-up contract (harness.App): a registry with
// both adapters watches app and app2, a recorder records what app sends,
// then a watchdog is attached with opts. It is stopped in t.Cleanup.
func (e *env) attach(opts ...watchdog.Option) {
	e.t.Helper()
	reg := harness.Watch(e.t, e.app, e.app2)
	e.rec = harness.Record(e.app)
	e.App = harness.Attach(e.t, reg, harness.Config{Options: opts, Lag: e.lag, Simulated: e.mini != nil})
}

// mustObtain obtains key through the library named lib on c, or fails the
// test.
func (e *env) mustObtain(lib string, c *redis.Client, key string, ttl time.Duration) *harness.Held {
	e.t.Helper()
	return harness.MustObtain(e.t, lib, c, key, ttl)
}

// state reads key's value and remaining TTL atomically through the spy.
func (e *env) state(key string) (value string, exists bool, pttl time.Duration) {
	e.t.Helper()
	e.tick()
	s := harness.ReadKeys(context.Background(), e.spy, []string{key}, harness.Atomic)[key]
	if s.Err != nil {
		e.t.Fatalf("GET+PTTL %q: got %v, want nil", key, s.Err)
	}
	return s.Value, s.Exists, s.PTTL
}

// watchHeld sleeps step by step for d and checks after every step, through
// the spy, that key still holds value with at least a third of ttl left
// (I2). It returns the smallest TTL seen.
func (e *env) watchHeld(key, value string, ttl, d, step time.Duration) time.Duration {
	e.t.Helper()
	least := time.Duration(1<<63 - 1)
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(step)
		v, ok, pttl := e.state(key)
		switch {
		case !ok:
			e.notJudgedAfterStall(ttl, "%v after the watch began: %q is gone (TTL %v)", time.Since(start), key, ttl)
			e.t.Fatalf("%v after the watch began: %q is gone, want it held with %q (TTL %v)%s%s", time.Since(start), key, value, ttl, e.lag.Note(ttl), e.pingNote(ttl))
		case v != value:
			e.t.Fatalf("%v after the watch began: GET %q = %q, want %q", time.Since(start), key, v, value)
		}
		if tol := e.tolerance(ttl); pttl < ttl/3-tol {
			e.notJudgedAfterStall(ttl, "%v after the watch began: PTTL %q = %v (TTL %v)", time.Since(start), key, pttl, ttl)
			e.t.Fatalf("%v after the watch began: PTTL %q = %v, want >= %v (a third of %v, %v tolerance)%s%s", time.Since(start), key, pttl, ttl/3-tol, ttl, tol, e.lag.Note(ttl), e.pingNote(ttl))
		}
		least = min(least, pttl)
	}
	return least
}

// notJudgedAfterStall ends the test as skipped, saying why, when this
// process (on a real server: the lag meter) stood still for a third of ttl
// or more within the last ttl: a holder that does not run cannot renew, and
// no watchdog inside it can keep the lock (the fencing limit, README's
// "What no watchdog can do"). CI run 59 under two burners and -race: a
// 200 ms lock gone after this process stood still 1.28 s.
//
// So too when the server did not answer a PING (lagmeter.StartProbe, on a
// connection of its own) for a third of ttl within the last ttl: a
// watchdog keeps a lock while its server answers within a third of its
// TTL (I2), and a redis-server process the machine does not run answers
// nobody. CI run 143 under two burners and -race: a 200 ms lock gone after
// a renewal and its hedge went 31 and 84 ms unanswered while this process
// was woken at most 30 ms late; the PING probe tells such a stall from
// one of the watchdog's own.
func (e *env) notJudgedAfterStall(ttl time.Duration, format string, args ...any) {
	e.t.Helper()
	now := time.Now()
	e.lag.NotJudged(e.t, ttl, now.Add(-ttl), now, format, args...)
	if stall := e.pings.Between(now.Add(-ttl), now); stall >= ttl/3 {
		e.t.Skipf("NOT JUDGED: "+format+"; the server's PINGs returned up to %v late within the lock's last TTL (at least a third of it), while this process ran: a watchdog keeps a lock while its server answers within a third of its TTL (I2)",
			append(args, stall.Round(time.Millisecond))...)
	}
}

// pingNote says, for a failure message, how late the server's PINGs
// returned within the last ttl.
func (e *env) pingNote(ttl time.Duration) string {
	if e.pings == nil {
		return ""
	}
	now := time.Now()
	return fmt.Sprintf("; the server's PINGs returned up to %v late in the last %v", e.pings.Between(now.Add(-ttl), now).Round(time.Millisecond), ttl)
}

// watchPresent is watchHeld without the TTL floor and looking inside
// miniredis rather than through a client, so that it works while Redis does
// not answer clients: key must hold value at every step.
func (e *env) watchPresent(key, value string, d, step time.Duration) {
	e.t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(step)
		e.tick()
		if v, err := e.mini.Get(key); err != nil || v != value {
			e.t.Fatalf("%v after the watch began: GET %q inside miniredis = (%q, %v), want %q: the lock expired", time.Since(start), key, v, err, value)
		}
	}
}

// watchGone sleeps step by step for d and checks after every step that key
// does not exist: nothing re-creates it.
func (e *env) watchGone(key string, d, step time.Duration) {
	e.t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(step)
		if v, ok, pttl := e.state(key); ok {
			e.t.Fatalf("%v after it was gone: %q exists again with %q (PTTL %v), want it gone", time.Since(start), key, v, pttl)
		}
	}
}

// watchUntouched checks for d that key keeps value and that its expiry
// never moves later than expiresAt: nobody renews it. Unless mayEnd, the key
// must not disappear before expiresAt either: nobody shortens or deletes it.
// It returns early once the key is gone.
func (e *env) watchUntouched(key, value string, expiresAt time.Time, mayEnd bool, d, step time.Duration) {
	e.t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(step)
		now := time.Now()
		v, ok, pttl := e.state(key)
		if !ok {
			if !mayEnd && now.Before(expiresAt.Add(-e.slack)) {
				e.t.Fatalf("%v: %q is gone %v before its own expiry, want %q", time.Since(start), key, expiresAt.Sub(now), value)
			}
			return
		}
		if v != value {
			e.t.Fatalf("%v: GET %q = %q, want %q (untouched)", time.Since(start), key, v, value)
		}
		if got := now.Add(pttl); got.After(expiresAt.Add(e.slack)) {
			e.t.Fatalf("%v: %q now expires %v later than it was set to, want its TTL untouched (PTTL %v)", time.Since(start), key, got.Sub(expiresAt), pttl)
		}
	}
}

// waitLost waits up to within for OnLost to report key and returns the
// first report.
func (e *env) waitLost(key string, within time.Duration) harness.LostEvent {
	e.t.Helper()
	step := max(within/200, time.Millisecond)
	start := time.Now()
	for {
		e.tick()
		if evs := e.Lost.ForKey(key); len(evs) > 0 {
			return evs[0]
		}
		if time.Since(start) > within+e.lag.Since(start) {
			break
		}
		time.Sleep(step)
	}
	// Too late: find out how late, for the failure message.
	late := "none within " + (10 * within).String()
	for time.Since(start) < 10*within {
		e.tick()
		if evs := e.Lost.ForKey(key); len(evs) > 0 {
			late = fmt.Sprintf("one %v after the wait began (reason %v)", evs[0].At.Sub(start), evs[0].Err)
			break
		}
		time.Sleep(step)
	}
	e.t.Fatalf("OnLost for %q: got no call within %v (%s), want one%s", key, within, late, e.lag.Note(time.Since(start)))
	return harness.LostEvent{}
}

// ---------------------------------------------------------------------------
// Scheduling lag, for the real-time tests.

// tolerance is the timing tolerance for something that should have happened
// within the last window: the fixed slack plus, in real time, the longest
// time this process was kept from running during that window (on a loaded
// machine the watchdog's timers fire late by as much as everything else).
func (e *env) tolerance(window time.Duration) time.Duration {
	return e.slack + e.lag.Since(time.Now().Add(-window))
}

// ---------------------------------------------------------------------------
// What the watchdog and the libraries send (harness.SentLog).

// connectionCmds are the commands a quiet client may send besides the
// watchdog's renew script.
var connectionCmds = map[string]bool{"hello": true, "client": true, "ping": true, "select": true}

// violations returns the commands of cmds other than the renew script and
// connection commands (I1 violations when only the watchdog should be
// talking), and how many renew script calls there were. The renew script
// is the owner-checked PEXPIRE, tested on its own in package scripts.
func violations(cmds []harness.SentCmd) (bad []string, renews int) {
	for _, c := range cmds {
		switch {
		case len(c.Args) == 0:
		case c.IsRenew():
			renews++
		case !connectionCmds[c.Name()]:
			bad = append(bad, strings.Join(c.Args, " "))
		}
	}
	return bad, renews
}

// mentioning returns the commands rec recorded after mark whose arguments
// include key and, in any argument, value: renewals of that lock.
func mentioning(rec *harness.SentLog, mark int, key, value string) []string {
	var out []string
	for _, c := range rec.After(mark) {
		if c.Names(key) && slices.ContainsFunc(c.Args[1:], func(a string) bool { return strings.Contains(a, value) }) {
			out = append(out, strings.Join(c.Args, " "))
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// I1: never creates a key nor changes a value.

// TestI1_NeverCreatesOrChangesKeys holds a lock next to the application's
// own keys and checks that, while only the watchdog talks, the watched
// client sends nothing but script calls; that the application's keys keep
// their values and expire on their own; and that the lock's key, deleted
// behind the holder's back, is never re-created.
func TestI1_NeverCreatesOrChangesKeys(t *testing.T) {
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			attached(t, nil, func(t *testing.T, e *env) {
				ctx := context.Background()
				const ttl = 100 * time.Millisecond
				key := "i1:lock"
				h := e.mustObtain(lb, e.app, key, ttl)
				if err := e.app.Set(ctx, "i1:plain", "p", 0).Err(); err != nil {
					t.Fatalf("SET i1:plain: got %v, want nil", err)
				}
				if err := e.app.SetNX(ctx, "i1:own-nx", "n", time.Second).Err(); err != nil {
					t.Fatalf("SETNX i1:own-nx: got %v, want nil", err)
				}
				if err := e.app.Do(ctx, "SET", "i1:own-do", "d", "NX", "PX", 1000).Err(); err != nil {
					t.Fatalf("SET i1:own-do NX PX 1000: got %v, want nil", err)
				}
				obtained := time.Now()
				quiet := e.rec.Mark()

				e.watchHeld(key, h.Value, ttl, 3*time.Second, 7*time.Millisecond)
				if v, ok, pttl := e.state("i1:plain"); !ok || v != "p" || pttl != -1 {
					t.Errorf("i1:plain after 3s: got (%q, exists %v, PTTL %v), want (%q, true, -1ns: no expiry)", v, ok, pttl, "p")
				}
				for _, k := range []string{"i1:own-nx", "i1:own-do"} {
					if v, ok, _ := e.state(k); ok {
						t.Errorf("%s %v after SET with a 1s TTL: got %q, want it expired (not renewed)", k, time.Since(obtained), v)
					}
				}

				if err := e.spy.Del(ctx, key).Err(); err != nil {
					t.Fatalf("DEL %s: got %v, want nil", key, err)
				}
				e.watchGone(key, 50*ttl, 7*time.Millisecond)
				bad, renews := violations(e.rec.After(quiet))
				if len(bad) > 0 {
					t.Errorf("commands sent through the watched client while only the watchdog ran: got %q, want only the renew script", bad)
				}
				if renews == 0 {
					t.Errorf("renew script calls while the lock was held: got 0, want some")
				}
			})
		})
	}
}

// ---------------------------------------------------------------------------
// I2: a tracked lock never drops below a third of its TTL.

// TestI2_HeldLocksKeepAThirdOfTheirTTL holds locks with TTLs from 50 ms to
// 2 h under several schedules (descriptors, five and six fields) and samples
// their TTL through the spy: it must never fall below TTL/3. Without the
// watchdog every one of these locks would expire during the hold.
func TestI2_HeldLocksKeepAThirdOfTheirTTL(t *testing.T) {
	cases := []struct {
		ttl      time.Duration
		schedule string // "" is the default
		hold     time.Duration
		opts     []watchdog.Option
	}{
		{ttl: 50 * time.Millisecond, hold: 5 * time.Second},
		{ttl: 100 * time.Millisecond, schedule: "@every 1s", hold: 5 * time.Second},
		{ttl: time.Second, schedule: "*/2 * * * * *", hold: 20 * time.Second},
		{ttl: 3 * time.Second, schedule: "@every 10s", hold: time.Minute},
		{ttl: 30 * time.Second, schedule: "* * * * *", hold: 5 * time.Minute},
		{ttl: 2 * time.Minute, schedule: "@every 15s", hold: 10 * time.Minute},
		{ttl: 2 * time.Hour, schedule: "@hourly", hold: 5 * time.Hour, opts: []watchdog.Option{watchdog.WithMaxHold(0)}},
	}
	for _, lb := range libs {
		for _, c := range cases {
			name := fmt.Sprintf("%s/ttl=%v/schedule=%q", lb, c.ttl, c.schedule)
			t.Run(name, func(t *testing.T) {
				bubble(t, func(t *testing.T) {
					e := newMiniEnv(t)
					opts := c.opts
					if c.schedule != "" {
						opts = append(opts, watchdog.WithSchedule(c.schedule))
					}
					e.attach(opts...)
					key := "i2:lock"
					h := e.mustObtain(lb, e.app, key, c.ttl)
					least := e.watchHeld(key, h.Value, c.ttl, c.hold, c.ttl/10+time.Millisecond)
					t.Logf("held %v; least PTTL seen %v of %v", c.hold, least, c.ttl)
					if l, ok := e.Tracked(key); !ok || l.Value != h.Value || l.Renewals == 0 {
						t.Errorf("registry after the hold: got (%+v, tracked %v), want %q tracked with renewals", l, ok, h.Value)
					}
					if err := h.Release(context.Background()); err != nil {
						t.Errorf("release after the hold: got %v, want nil", err)
					}
					if _, ok, _ := e.state(key); ok {
						t.Errorf("%s after release: got it present, want it gone", key)
					}
				})
			})
		}
	}
}

// TestI2_RedislockHundredMillisecondsForAnHour holds a 100 ms redislock lock
// for a simulated hour and a minute under the default schedule, with no max
// hold (WithMaxHold(0) means unbounded). The TTL is sampled densely at the
// start and the end and every second in between.
//
// Under -race the hold is six minutes, not an hour: the race detector makes
// each of the 108,000 renewals through miniredis's Lua several times
// slower, and this one test was most of the -race suite's time in CI (the
// root package: 372 s of a 432 s step on a loaded machine). Its code paths
// are those of the six minutes; CI runs the whole hour without -race too,
// against the newest upstream releases.
func TestI2_RedislockHundredMillisecondsForAnHour(t *testing.T) {
	harness.SkipShort(t, "about 108,000 renewals through miniredis's Lua (15 s of CPU)")
	// About 108,000 renewals through miniredis's Lua: the slowest test of
	// the suite on CPU. It runs alone, not beside the real-server tests: in
	// the same process it kept both of its CPUs busy while they timed 200
	// ms locks, and CI runs 143 and 144 lost such a lock after this process
	// was measured 30 and 55 ms late (a watchdog's wake 130 ms late): a
	// burner inside the process under test, not the load the tests judge.
	hold := time.Hour
	if raceEnabled {
		hold = 6 * time.Minute
	}
	attached(t, []watchdog.Option{watchdog.WithMaxHold(0)}, func(t *testing.T, e *env) {
		const ttl = 100 * time.Millisecond
		key := "i2:hour"
		lb := harness.Redislock
		h := e.mustObtain(lb, e.app, key, ttl)
		start := time.Now()
		least := e.watchHeld(key, h.Value, ttl, 3*time.Second, 7*time.Millisecond)
		least = min(least, e.watchHeld(key, h.Value, ttl, hold-3*time.Second, 1009*time.Millisecond))
		least = min(least, e.watchHeld(key, h.Value, ttl, 3*time.Second, 7*time.Millisecond))
		t.Logf("held %v; least PTTL seen %v; %d renewals; stats %+v", time.Since(start), least, renewalsOf(e, key), e.WD.Stats())
		if len(e.Lost.ForKey(key)) != 0 {
			t.Errorf("OnLost for %s: got %v, want no call", key, e.Lost.ForKey(key))
		}
		if err := h.Release(context.Background()); err != nil {
			t.Errorf("release after an hour: got %v, want nil", err)
		}
	})
}

func renewalsOf(e *env, key string) int64 {
	l, _ := e.Tracked(key)
	return l.Renewals
}

// TestI2_RedsyncDefaultExpiryUnderDefaultSchedule: redsync's default 8 s
// expiry, held for 30 s, with every lockwatch default ("@every 10s"): the
// ticks alone would let it expire.
func TestI2_RedsyncDefaultExpiryUnderDefaultSchedule(t *testing.T) {
	attached(t, nil, func(t *testing.T, e *env) {
		key := "i2:redsync-default"
		// Business code, unchanged: every redsync default.
		mu := redsync.New(goredis.NewPool(e.app)).NewMutex(key)
		if err := mu.Lock(); err != nil {
			t.Fatalf("Lock: got %v, want nil", err)
		}
		const ttl = 8 * time.Second
		least := e.watchHeld(key, mu.Value(), ttl, 30*time.Second, 97*time.Millisecond)
		t.Logf("least PTTL seen %v of %v", least, ttl)
		if ok, err := mu.Unlock(); !ok || err != nil {
			t.Errorf("Unlock after 30s: got (%v, %v), want (true, nil)", ok, err)
		}
	})
}

// TestI2_ContendersNeverObtainAHeldLock: while a 100 ms lock is held,
// contenders of both libraries on another watched client and on an
// unwatched one try again and again; none obtains it, and the registry keeps
// tracking the holder's value.
func TestI2_ContendersNeverObtainAHeldLock(t *testing.T) {
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			attached(t, nil, func(t *testing.T, e *env) {
				ctx := context.Background()
				const ttl = 100 * time.Millisecond
				key := "i2:contended"
				h := e.mustObtain(lb, e.app, key, ttl)
				clients := map[string]*redis.Client{"watched app2": e.app2, "unwatched": e.spy}
				start := time.Now()
				for time.Since(start) < 3*time.Second {
					e.watchHeld(key, h.Value, ttl, 51*time.Millisecond, 17*time.Millisecond)
					for cname, c := range clients {
						for _, other := range libs {
							if got, err := harness.Obtain(ctx, other, c, key, ttl); err == nil {
								t.Fatalf("%v: %s contender on the %s client: got the lock (%q), want it refused", time.Since(start), other, cname, got.Value)
							}
						}
					}
				}
				if l, ok := e.Reg.Get(e.app, key); !ok || l.Value != h.Value {
					t.Errorf("registry for app after contention: got (%q, %v), want (%q, true)", l.Value, ok, h.Value)
				}
				if l, ok := e.Reg.Get(e.app2, key); ok {
					t.Errorf("registry for app2 after contention: got %q tracked, want nothing", l.Value)
				}
			})
		})
	}
}

// ---------------------------------------------------------------------------
// I3: after a release returns, no renewal for that key and value is sent.

// TestI3_ReleasedLocksAreNotRenewed releases one of two held locks, then
// checks that it is untracked at once, that no command naming its key and
// value is sent after the release returned, that the key stays gone over
// 50 periods while the other lock stays held, and that a contender obtains
// it and keeps it under its own value.
func TestI3_ReleasedLocksAreNotRenewed(t *testing.T) {
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			attached(t, nil, func(t *testing.T, e *env) {
				const ttl = 100 * time.Millisecond
				checkRelease(t, e, lb, ttl, time.Second+3*time.Millisecond, 50*ttl, 7*time.Millisecond)
			})
		})
	}
}

func checkRelease(t testing.TB, e *env, lb string, ttl, hold, after, step time.Duration) {
	t.Helper()
	ctx := context.Background()
	key, kept := "i3:released", "i3:kept"
	h := e.mustObtain(lb, e.app, key, ttl)
	hk := e.mustObtain(lb, e.app, kept, ttl)
	e.watchHeld(key, h.Value, ttl, hold, step)
	if err := h.Release(ctx); err != nil {
		t.Fatalf("release: got %v, want nil", err)
	}
	mark := e.rec.Mark()
	if l, ok := e.Tracked(key); ok {
		t.Errorf("registry right after release: got %q tracked, want it untracked", l.Value)
	}
	start := time.Now()
	for time.Since(start) < after {
		e.watchHeld(kept, hk.Value, ttl, 5*step, step)
		if v, ok, _ := e.state(key); ok {
			t.Fatalf("%v after release: %s exists with %q, want it gone", time.Since(start), key, v)
		}
	}
	if sent := mentioning(e.rec, mark, key, h.Value); len(sent) > 0 {
		t.Errorf("commands naming the released lock after release returned: got %q, want none", sent)
	}
	if n := len(e.Lost.ForKey(key)); n != 0 {
		t.Errorf("OnLost calls for the released lock: got %d, want 0", n)
	}
	// A contender on the other watched client takes the key; the old value
	// never comes back and the contender's lock is held in turn.
	hc := e.mustObtain(lb, e.app2, key, ttl)
	e.watchHeld(key, hc.Value, ttl, after/2, step)
	if sent := mentioning(e.rec, mark, key, h.Value); len(sent) > 0 {
		t.Errorf("commands naming the released lock after a contender took the key: got %q, want none", sent)
	}
	for _, x := range []*harness.Held{hc, hk} {
		if err := x.Release(ctx); err != nil {
			t.Errorf("release at the end: got %v, want nil", err)
		}
	}
}

// ---------------------------------------------------------------------------
// I4: after the holder dies nothing renews its locks.

// TestI4_StoppedHolderFreesItsLocks simulates a holder that dies without
// releasing (the watchdog stopped, the client closed): the lock expires
// within its TTL, nothing is sent after Stop returned, and a contender
// obtains it. Stop is idempotent.
func TestI4_StoppedHolderFreesItsLocks(t *testing.T) {
	for _, lb := range libs {
		for _, ttl := range []time.Duration{100 * time.Millisecond, 8 * time.Second} {
			t.Run(fmt.Sprintf("%s/ttl=%v", lb, ttl), func(t *testing.T) {
				attached(t, nil, func(t *testing.T, e *env) {
					key := "i4:lock"
					h := e.mustObtain(lb, e.app, key, ttl)
					e.watchHeld(key, h.Value, ttl, 3*ttl+ttl/7, ttl/10+time.Millisecond)
					e.WD.Stop()
					e.WD.Stop() // idempotent
					mark := e.rec.Mark()
					stopped := time.Now()
					_ = e.app.Close() // the holder is gone; it never releases
					e.watchUntouched(key, h.Value, stopped.Add(ttl), true, ttl+time.Millisecond, ttl/20+time.Millisecond)
					if v, ok, pttl := e.state(key); ok {
						t.Fatalf("%v after the holder died: %s holds %q (PTTL %v), want it expired", time.Since(stopped), key, v, pttl)
					}
					if n := len(e.rec.After(mark)); n != 0 {
						t.Errorf("commands sent through the holder's client after Stop: got %d, want 0", n)
					}
					c := e.mustObtain(lb, e.spy, key, ttl)
					if v, _, _ := e.state(key); v != c.Value {
						t.Errorf("GET after the contender obtained: got %q, want %q", v, c.Value)
					}
				})
			})
		}
	}
}

// ---------------------------------------------------------------------------
// I5: a lost lock is untracked and reported within one renewal period, and
// never re-created.

type lossCase struct {
	ttl      time.Duration
	schedule string
	every    time.Duration
}

var lossCases = []lossCase{
	{ttl: 100 * time.Millisecond, every: defaultEvery},
	{ttl: 8 * time.Second, every: defaultEvery},
	{ttl: 30 * time.Second, schedule: "@every 5s", every: 5 * time.Second},
	{ttl: 3 * time.Second, schedule: "* * * * * *", every: time.Second},
}

func (c lossCase) opts() []watchdog.Option {
	if c.schedule == "" {
		return nil
	}
	return []watchdog.Option{watchdog.WithSchedule(c.schedule)}
}

func (c lossCase) String() string { return fmt.Sprintf("ttl=%v/schedule=%q", c.ttl, c.schedule) }

// TestI5_DeletedLockIsReported deletes a held lock's key behind the
// holder's back: OnLost gets ErrLockGone (an ErrLost) within one renewal
// period, the lock is untracked, reported once, and the key stays gone.
func TestI5_DeletedLockIsReported(t *testing.T) { forLossCases(t, libs, checkDeleted) }

// TestI5_StolenLockIsReported overwrites a held lock's key with an
// intruder's value and TTL: OnLost gets ErrLockTaken (an ErrLost) within one
// renewal period, the lock is untracked, and the intruder's value and expiry
// are never touched (I1), not even by the holder's late release.
func TestI5_StolenLockIsReported(t *testing.T) { forLossCases(t, libs, checkStolen) }

// forLossCases runs check in a bubble for each library of lbs and each loss
// case, with a watchdog attached as the case says. A subtest is named by
// the library and the case, or by the case alone for the library "".
func forLossCases(t *testing.T, lbs []string, check func(t testing.TB, e *env, lb string, ttl, per time.Duration)) {
	for _, lb := range lbs {
		for _, c := range lossCases {
			name := c.String()
			if lb != "" {
				name = lb + "/" + name
			}
			t.Run(name, func(t *testing.T) {
				attached(t, c.opts(), func(t *testing.T, e *env) {
					check(t, e, lb, c.ttl, period(c.ttl, c.every))
				})
			})
		}
	}
}

// loss is how a test takes a held lock from its holder, and how OnLost
// must report it.
type loss struct {
	what          string                          // "delete", "steal"
	do            func(ctx context.Context) error // takes the lock
	want, notWant error                           // the reason (an ErrLost), and what it must not match
	names         string                          // the reasons' names, for messages
}

// holdThenLose obtains key through lb on app, watches it held for a period
// and a third, takes it as l says, and checks the report: the reason, the
// lock, within a period of the loss (plus the slack), and the lock
// untracked. It returns the holder's lock and the watch's step.
func (e *env) holdThenLose(lb, key string, ttl, per time.Duration, l loss) (h *harness.Held, step time.Duration) {
	t := e.t
	t.Helper()
	h = e.mustObtain(lb, e.app, key, ttl)
	step = per/10 + time.Millisecond
	e.watchHeld(key, h.Value, ttl, per+per/3, step)
	if err := l.do(context.Background()); err != nil {
		t.Fatalf("%s: got %v, want nil", l.what, err)
	}
	lost := time.Now()
	ev := e.waitLost(key, per+e.slack)
	if !errors.Is(ev.Err, l.want) || !errors.Is(ev.Err, watchdog.ErrLost) || errors.Is(ev.Err, l.notWant) {
		t.Errorf("OnLost reason: got %v, want %s", ev.Err, l.names)
	}
	if ev.Lock.Key != key || ev.Lock.Value != h.Value {
		t.Errorf("OnLost lock: got (%q, %q), want (%q, %q)", ev.Lock.Key, ev.Lock.Value, key, h.Value)
	}
	if d, tol := ev.At.Sub(lost), e.slack+e.lag.Since(lost); d > per+tol {
		t.Errorf("OnLost came %v after the %s, want within one renewal period (%v)", d, l.what, per)
	}
	if l, ok := e.Tracked(key); ok {
		t.Errorf("registry after OnLost: got %q tracked, want it untracked", l.Value)
	}
	return h, step
}

func checkDeleted(t testing.TB, e *env, lb string, ttl, per time.Duration) {
	t.Helper()
	const key = "i5:deleted"
	h, step := e.holdThenLose(lb, key, ttl, per, loss{
		what: "delete",
		do:   func(ctx context.Context) error { return e.spy.Del(ctx, key).Err() },
		want: watchdog.ErrLockGone, notWant: watchdog.ErrLockTaken,
		names: "ErrLockGone (which is an ErrLost, not ErrLockTaken)",
	})
	e.watchGone(key, e.periods(10)*per, step)
	if evs := e.Lost.ForKey(key); len(evs) != 1 {
		t.Errorf("OnLost calls for %s: got %d, want 1", key, len(evs))
	}
	if err := h.Release(context.Background()); err == nil {
		t.Errorf("holder's release of a deleted lock: got nil, want the library's not-held error")
	}
	c := e.mustObtain(lb, e.spy, key, ttl)
	if v, _, _ := e.state(key); v != c.Value {
		t.Errorf("GET after a contender obtained: got %q, want %q", v, c.Value)
	}
}

func checkStolen(t testing.TB, e *env, lb string, ttl, per time.Duration) {
	t.Helper()
	const key, intruder = "i5:stolen", "intruder"
	intruderTTL := 20 * per
	var expires time.Time
	h, step := e.holdThenLose(lb, key, ttl, per, loss{
		what: "steal",
		do: func(ctx context.Context) error {
			expires = time.Now().Add(intruderTTL)
			return e.spy.Set(ctx, key, intruder, intruderTTL).Err()
		},
		want: watchdog.ErrLockTaken, notWant: watchdog.ErrLockGone,
		names: "ErrLockTaken (which is an ErrLost, not ErrLockGone)",
	})
	e.watchUntouched(key, intruder, expires, false, e.periods(5)*per, step)
	if err := h.Release(context.Background()); err == nil {
		t.Errorf("holder's release of a stolen lock: got nil, want the library's not-held error")
	}
	e.watchUntouched(key, intruder, expires, false, e.periods(5)*per, step)
	if evs := e.Lost.ForKey(key); len(evs) != 1 {
		t.Errorf("OnLost calls for %s: got %d, want 1", key, len(evs))
	}
}

// outage is what miniredis answers to every command while Redis is "down".
const outage = "LOADING Redis is loading the dataset in memory"

// outageKind is one way for Redis to be unreachable.
type outageKind struct {
	name       string
	begin, end func(m *miniredis.Miniredis)
	client     func(*redis.Options) // client options; nil for the defaults
}

func blackhole(m *miniredis.Miniredis) {
	m.Server().SetPreHook(func(*server.Peer, string, ...string) bool { return true })
}

func answer(m *miniredis.Miniredis) { m.Server().SetPreHook(nil) }

var outages = []outageKind{
	// Every command fails at once with LOADING, which go-redis retries
	// (three times, with jittered backoff) before it gives up.
	{
		name:  "errors",
		begin: func(m *miniredis.Miniredis) { m.SetError(outage) },
		end:   func(m *miniredis.Miniredis) { m.SetError("") },
	},
	// Nothing answers (a network partition, a hung server), with the
	// clients' default options: go-redis v9 ignores context deadlines on
	// socket reads unless ContextTimeoutEnabled, so a renewal in flight
	// waits for ReadTimeout (3 s).
	{name: "silence", begin: blackhole, end: answer},
	// Nothing answers, and the clients honour context deadlines, as the
	// README advises.
	{
		name:   "silence-ctxtimeout",
		begin:  blackhole,
		end:    answer,
		client: func(o *redis.Options) { o.ContextTimeoutEnabled = true },
	},
}

// TestI5_UnreachableLongerThanTTL makes Redis unreachable for three TTLs:
// OnLost gets ErrUnreachable once the TTL since the last confirmed renewal
// has passed (not before, and within one renewal period after the TTL since
// the last renewal sent before then, which a process waiting for a CPU
// cannot rule out Redis applied), the lock is
// untracked, and when Redis answers again the expired key is not re-created
// and a contender obtains it.
//
// With "errors", when the report comes depends on go-redis's jittered retry
// backoff, so a late report may show in some runs only.
func TestI5_UnreachableLongerThanTTL(t *testing.T) {
	for _, lb := range libs {
		for _, o := range outages {
			for _, ttl := range []time.Duration{100 * time.Millisecond, time.Second, 8 * time.Second} {
				t.Run(fmt.Sprintf("%s/%s/ttl=%v", lb, o.name, ttl), func(t *testing.T) {
					bubble(t, func(t *testing.T) {
						e := newMiniEnvWith(t, o.client)
						e.attach()
						key := "i5:unreachable"
						per := period(ttl, defaultEvery)
						h := e.mustObtain(lb, e.app, key, ttl)
						e.watchHeld(key, h.Value, ttl, 2*ttl+7*time.Millisecond, ttl/10+time.Millisecond)
						o.begin(e.mini)
						down := time.Now()
						// The bound checked below may end a TTL past the
						// outage's start: the last renewal sent before the
						// TTL since the last confirmation passed (at most
						// that TTL after the outage began) plus the TTL and
						// a period (CI run 111: a retry sent 15 ms before a
						// 100 ms lock's TTL passed, reported 92 ms after it).
						ev := e.waitLost(key, 2*ttl+per)
						if !errors.Is(ev.Err, watchdog.ErrUnreachable) || !errors.Is(ev.Err, watchdog.ErrLost) ||
							errors.Is(ev.Err, watchdog.ErrLockGone) || errors.Is(ev.Err, watchdog.ErrLockTaken) {
							t.Errorf("OnLost reason: got %v, want ErrUnreachable (an ErrLost, neither gone nor taken)", ev.Err)
						}
						if ev.Lock.Key != key || ev.Lock.Value != h.Value {
							t.Errorf("OnLost lock: got (%q, %q), want (%q, %q)", ev.Lock.Key, ev.Lock.Value, key, h.Value)
						}
						// The report waits a TTL past the last renewal sent
						// before the key may have expired when the watchdog
						// cannot rule out that Redis applied it, its answer
						// unread (I12): while this process waits for a CPU,
						// as it does beside CI's burners. Nothing here
						// answers, so the watchdog reports within a period
						// of that TTL.
						from := e.rec.LastRenewal(key, ev.Lock.ConfirmedAt, ev.Lock.ConfirmedAt.Add(ttl))
						if d := ev.At.Sub(ev.Lock.ConfirmedAt); d < ttl || ev.At.Sub(from) > ttl+per {
							t.Errorf("OnLost came %v after the last confirmed renewal, %v after the last renewal sent before its TTL passed, want between the TTL (%v) after the first and TTL + one period (%v) after the second", d, ev.At.Sub(from), ttl, ttl+per)
						}
						if l, ok := e.Tracked(key); ok {
							t.Errorf("registry after OnLost: got %q tracked, want it untracked", l.Value)
						}
						time.Sleep(max(0, 3*ttl-time.Since(down)))
						if e.mini.Exists(key) {
							t.Errorf("%s after %v without Redis: got it present, want it expired", key, time.Since(down))
						}
						o.end(e.mini)
						e.watchGone(key, 10*per, per/10+time.Millisecond)
						if evs := e.Lost.ForKey(key); len(evs) != 1 {
							t.Errorf("OnLost calls for %s: got %d, want 1", key, len(evs))
						}
						c := e.mustObtain(lb, e.spy, key, ttl)
						if v, _, _ := e.state(key); v != c.Value {
							t.Errorf("GET after a contender obtained: got %q, want %q", v, c.Value)
						}
					})
				})
			}
		}
	}
}

// TestI5_UnreachableShorterThanTTLKeepsTheLock makes Redis unreachable for
// a third of the TTL, starting right after a renewal: renewals are retried,
// the lock never expires (checked inside miniredis, even while clients get
// no answer), nothing is reported, and from one TTL after Redis answers
// again the TTL stays above a third.
func TestI5_UnreachableShorterThanTTLKeepsTheLock(t *testing.T) {
	for _, lb := range libs {
		for _, o := range outages {
			for _, ttl := range []time.Duration{300 * time.Millisecond, 3 * time.Second} {
				t.Run(fmt.Sprintf("%s/%s/ttl=%v", lb, o.name, ttl), func(t *testing.T) {
					bubble(t, func(t *testing.T) {
						e := newMiniEnvWith(t, o.client)
						e.attach()
						key := "i5:blip"
						h := e.mustObtain(lb, e.app, key, ttl)
						e.watchHeld(key, h.Value, ttl, ttl+7*time.Millisecond, ttl/10+time.Millisecond)
						o.begin(e.mini)
						e.watchPresent(key, h.Value, ttl/3, ttl/30)
						o.end(e.mini)
						e.watchPresent(key, h.Value, ttl, ttl/30)
						e.watchHeld(key, h.Value, ttl, 5*ttl, ttl/10+time.Millisecond)
						if evs := e.Lost.ForKey(key); len(evs) != 0 {
							t.Errorf("OnLost after a short outage: got %v, want no call", evs[0].Err)
						}
						if err := h.Release(context.Background()); err != nil {
							t.Errorf("release after the outage: got %v, want nil", err)
						}
					})
				})
			}
		}
	}
}

// ---------------------------------------------------------------------------
// I6: no lock is renewed past its max hold.

// TestI6_MaxHold holds locks past WithMaxHold: they are renewed until then,
// OnLost gets ErrMaxHold within one period of it, they are untracked, and
// their expiry never moves past max hold + TTL (no renewal after max hold).
func TestI6_MaxHold(t *testing.T) {
	cases := []struct {
		ttl, maxHold time.Duration
		schedule     string
		every        time.Duration
	}{
		{ttl: 100 * time.Millisecond, maxHold: 2 * time.Second, every: defaultEvery},
		{ttl: time.Second, maxHold: 5 * time.Second, schedule: "@every 1s", every: time.Second},
		{ttl: 8 * time.Second, maxHold: time.Minute, every: defaultEvery},
	}
	for _, lb := range libs {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/ttl=%v/maxhold=%v", lb, c.ttl, c.maxHold), func(t *testing.T) {
				bubble(t, func(t *testing.T) {
					e := newMiniEnv(t)
					opts := []watchdog.Option{watchdog.WithMaxHold(c.maxHold)}
					if c.schedule != "" {
						opts = append(opts, watchdog.WithSchedule(c.schedule))
					}
					e.attach(opts...)
					checkMaxHold(t, e, lb, c.ttl, c.maxHold, period(c.ttl, c.every), c.ttl/10+time.Millisecond)
				})
			})
		}
	}
}

func checkMaxHold(t testing.TB, e *env, lb string, ttl, maxHold, per, step time.Duration) {
	t.Helper()
	key := "i6:lock"
	h := e.mustObtain(lb, e.app, key, ttl)
	l, ok := e.Tracked(key)
	if !ok {
		t.Fatalf("registry after obtain: got %s untracked, want it tracked", key)
	}
	end := l.ObtainedAt.Add(maxHold)
	if d := time.Until(end) - per; d > 0 {
		e.watchHeld(key, h.Value, ttl, d, step)
	}
	// From max hold on, the key's expiry must not move past end + ttl.
	last := end.Add(ttl)
	for time.Now().Before(last.Add(per + e.slack)) {
		time.Sleep(step)
		now := time.Now()
		v, ok, pttl := e.state(key)
		if !ok {
			if now.Before(end) {
				t.Fatalf("%v before max hold: %s is gone, want it held", end.Sub(now), key)
			}
			continue
		}
		if v != h.Value {
			t.Fatalf("GET %s: got %q, want %q", key, v, h.Value)
		}
		if exp := now.Add(pttl); exp.After(last.Add(e.tolerance(ttl))) {
			t.Fatalf("%v after max hold: %s expires %v after max hold, want at most its TTL (%v): renewed past max hold", now.Sub(end), key, exp.Sub(end), ttl)
		}
	}
	if v, ok, _ := e.state(key); ok {
		t.Errorf("%v after max hold: %s holds %q, want it expired", time.Since(end), key, v)
	}
	ev := e.waitLost(key, e.slack)
	if !errors.Is(ev.Err, watchdog.ErrMaxHold) {
		t.Errorf("OnLost reason: got %v, want ErrMaxHold", ev.Err)
	}
	if ev.At.Before(end) || ev.At.After(end.Add(per+e.slack+e.lag.Since(end))) {
		t.Errorf("OnLost came %v after max hold, want within [0, %v]", ev.At.Sub(end), per)
	}
	if l, ok := e.Tracked(key); ok {
		t.Errorf("registry after max hold: got %q tracked, want it untracked", l.Value)
	}
	if evs := e.Lost.ForKey(key); len(evs) != 1 {
		t.Errorf("OnLost calls for %s: got %d, want 1", key, len(evs))
	}
}

// TestI6_DefaultMaxHoldIsOneHour holds a lock with every default (redsync's
// 8 s expiry, "@every 10s", max hold 1h): it is kept for the hour, then
// dropped with ErrMaxHold and expires.
func TestI6_DefaultMaxHoldIsOneHour(t *testing.T) {
	attached(t, nil, func(t *testing.T, e *env) {
		key := "i6:default"
		mu := redsync.New(goredis.NewPool(e.app)).NewMutex(key)
		if err := mu.Lock(); err != nil {
			t.Fatalf("Lock: got %v, want nil", err)
		}
		const ttl = 8 * time.Second
		l, ok := e.Tracked(key)
		if !ok {
			t.Fatalf("registry after Lock: got %s untracked, want it tracked", key)
		}
		end := l.ObtainedAt.Add(watchdog.DefaultMaxHold)
		e.watchHeld(key, mu.Value(), ttl, time.Until(end)-defaultEvery, 997*time.Millisecond)
		time.Sleep(time.Until(end.Add(ttl + time.Millisecond)))
		if v, ok, _ := e.state(key); ok {
			t.Errorf("%v after obtain: %s holds %q, want it expired after the default max hold", time.Since(l.ObtainedAt), key, v)
		}
		ev := e.waitLost(key, time.Millisecond)
		if !errors.Is(ev.Err, watchdog.ErrMaxHold) {
			t.Errorf("OnLost reason: got %v, want ErrMaxHold", ev.Err)
		}
		if d := ev.At.Sub(l.ObtainedAt); d < time.Hour || d > time.Hour+period(ttl, defaultEvery) {
			t.Errorf("OnLost came %v after obtain, want within one period after 1h", d)
		}
	})
}

// ---------------------------------------------------------------------------
// Options.

// TestWithFilterExcludedLocksExpire: a lock the filter excludes is never
// renewed and expires within its TTL, while the others are kept.
func TestWithFilterExcludedLocksExpire(t *testing.T) {
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			filter := watchdog.WithFilter(func(l registry.Lock) bool { return !strings.HasPrefix(l.Key, "skip:") })
			attached(t, []watchdog.Option{filter}, func(t *testing.T, e *env) {
				const ttl = 100 * time.Millisecond
				skipped := e.mustObtain(lb, e.app, "skip:lock", ttl)
				kept := e.mustObtain(lb, e.app, "keep:lock", ttl)
				e.watchUntouched("skip:lock", skipped.Value, time.Now().Add(ttl), false, 2*ttl, 3*time.Millisecond)
				if _, ok, _ := e.state("skip:lock"); ok {
					t.Errorf("excluded lock after twice its TTL: got it present, want it expired")
				}
				e.watchHeld("keep:lock", kept.Value, ttl, 3*time.Second, 7*time.Millisecond)
			})
		})
	}
}

// TestSweepRenewsNow: Sweep renews every tracked lock at once.
func TestSweepRenewsNow(t *testing.T) {
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			attached(t, []watchdog.Option{watchdog.WithSchedule("@daily"), watchdog.WithMaxHold(0)}, func(t *testing.T, e *env) {
				const ttl = 3 * time.Hour
				key := "sweep:lock"
				h := e.mustObtain(lb, e.app, key, ttl)
				time.Sleep(30 * time.Minute)
				if _, _, pttl := e.state(key); pttl != ttl-30*time.Minute {
					t.Fatalf("PTTL after 30m: got %v, want %v (no renewal yet)", pttl, ttl-30*time.Minute)
				}
				if err := e.WD.Sweep(context.Background()); err != nil {
					t.Fatalf("Sweep: got %v, want nil", err)
				}
				if v, _, pttl := e.state(key); v != h.Value || pttl != ttl {
					t.Errorf("after Sweep: got (%q, PTTL %v), want (%q, %v)", v, pttl, h.Value, ttl)
				}
			})
		})
	}
}

// ---------------------------------------------------------------------------
// I7: the version guard, and Attach's input checks.

// changedAdapter stands for an upstream library that sends a script
// lockwatch does not know.
type changedAdapter struct{}

const (
	changedLibrary = "example.com/fakelock"
	changedSHA1    = "0123456789abcdef0123456789abcdef01234567"
)

func (changedAdapter) Name() string                              { return "fakelock" }
func (changedAdapter) Classify(registry.Command) registry.Action { return registry.Action{} }
func (changedAdapter) Probe(ctx context.Context) error {
	return &registry.UpstreamChangedError{
		Library: changedLibrary,
		Version: "v9.9.9",
		Scripts: []registry.Script{{Use: "obtain", SHA1: changedSHA1}},
	}
}

// TestI7_AttachRefusesUnknownUpstreamScripts: an adapter whose probe finds
// unpinned scripts makes Attach fail with ErrUpstreamChanged, naming the
// library and the script, wherever it sits among the adapters.
func TestI7_AttachRefusesUnknownUpstreamScripts(t *testing.T) {
	cases := map[string][]registry.Adapter{
		"alone":  {changedAdapter{}},
		"last":   {bsmredislock.New(), goredsync.New(), changedAdapter{}},
		"first":  {changedAdapter{}, bsmredislock.New()},
		"middle": {goredsync.New(), changedAdapter{}, bsmredislock.New()},
	}
	for name, adapters := range cases {
		t.Run(name, func(t *testing.T) {
			wd, err := attachNoPanic(t, registry.New(adapters...))
			if wd != nil {
				wd.Stop()
				t.Errorf("Attach: got a watchdog, want nil")
			}
			if !errors.Is(err, registry.ErrUpstreamChanged) {
				t.Fatalf("Attach: got %v, want an error matching registry.ErrUpstreamChanged", err)
			}
			var uce *registry.UpstreamChangedError
			if !errors.As(err, &uce) || uce.Library != changedLibrary {
				t.Errorf("Attach error as *UpstreamChangedError: got %#v, want Library %q", uce, changedLibrary)
			}
			for _, want := range []string{changedLibrary, changedSHA1, "obtain"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Attach error text: got %q, want it to name %q", err, want)
				}
			}
		})
	}
}

// TestI7_AttachAcceptsTheLinkedUpstreams: the redislock and redsync
// versions this module links send only pinned scripts.
func TestI7_AttachAcceptsTheLinkedUpstreams(t *testing.T) {
	cases := map[string][]registry.Adapter{
		"both":      {bsmredislock.New(), goredsync.New()},
		"redislock": {bsmredislock.New()},
		"redsync":   {goredsync.New()},
	}
	for name, adapters := range cases {
		t.Run(name, func(t *testing.T) {
			wd, err := attachNoPanic(t, registry.New(adapters...))
			if err != nil {
				t.Fatalf("Attach: got %v, want nil", err)
			}
			wd.Stop()
		})
	}
}

// TestAttachRejectsBadInput: bad input is an error, never a panic nor a
// watchdog; valid schedules and max holds are accepted.
func TestAttachRejectsBadInput(t *testing.T) {
	good := func() *registry.Registry { return registry.New(bsmredislock.New(), goredsync.New()) }
	bad := map[string]struct {
		reg  *registry.Registry
		opts []watchdog.Option
	}{
		"nil registry":          {reg: nil},
		"no adapters":           {reg: registry.New()},
		"only nil adapters":     {reg: registry.New(nil, nil)},
		"schedule not a spec":   {reg: good(), opts: []watchdog.Option{watchdog.WithSchedule("not a spec")}},
		"empty schedule":        {reg: good(), opts: []watchdog.Option{watchdog.WithSchedule("")}},
		"seven fields":          {reg: good(), opts: []watchdog.Option{watchdog.WithSchedule("* * * * * * *")}},
		"negative max hold":     {reg: good(), opts: []watchdog.Option{watchdog.WithMaxHold(-1)}},
		"negative max hold (h)": {reg: good(), opts: []watchdog.Option{watchdog.WithMaxHold(-time.Hour)}},
		"max hold below 1s":     {reg: good(), opts: []watchdog.Option{watchdog.WithMaxHold(time.Millisecond)}},
		"never fires":           {reg: good(), opts: []watchdog.Option{watchdog.WithSchedule("0 0 30 2 *")}},
		"timeout below 1ms":     {reg: good(), opts: []watchdog.Option{watchdog.WithTimeout(time.Microsecond)}},
	}
	for name, c := range bad {
		t.Run("bad/"+name, func(t *testing.T) {
			wd, err := attachNoPanic(t, c.reg, c.opts...)
			if wd != nil {
				wd.Stop()
				t.Errorf("Attach: got a watchdog, want nil")
			}
			if err == nil {
				t.Fatalf("Attach: got nil error, want one")
			}
			if errors.Is(err, registry.ErrUpstreamChanged) {
				t.Errorf("Attach: got %v, want an error that is not ErrUpstreamChanged", err)
			}
		})
	}
	goodOpts := map[string][]watchdog.Option{
		"defaults":        nil,
		"descriptor":      {watchdog.WithSchedule("@hourly")},
		"every":           {watchdog.WithSchedule("@every 2s")},
		"five fields":     {watchdog.WithSchedule("*/5 * * * *")},
		"six fields":      {watchdog.WithSchedule("*/3 * * * * *")},
		"no max hold":     {watchdog.WithMaxHold(0)},
		"short max hold":  {watchdog.WithMaxHold(time.Second)},
		"filter":          {watchdog.WithFilter(func(registry.Lock) bool { return true })},
		"on lost, logger": {watchdog.WithOnLost(func(registry.Lock, error) {}), watchdog.WithLogger(slog.New(slog.DiscardHandler))},
	}
	for name, opts := range goodOpts {
		t.Run("good/"+name, func(t *testing.T) {
			wd, err := attachNoPanic(t, good(), opts...)
			if err != nil {
				t.Fatalf("Attach: got %v, want nil", err)
			}
			wd.Stop()
			wd.Stop() // idempotent
		})
	}
}

// attachNoPanic calls watchdog.Attach and turns a panic into a test failure.
func attachNoPanic(t testing.TB, reg *registry.Registry, opts ...watchdog.Option) (wd *watchdog.Watchdog, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Attach panicked: %v; want an error", p)
		}
	}()
	return watchdog.Attach(reg, opts...)
}

// ---------------------------------------------------------------------------
// I8: the libraries behave exactly as without lockwatch.

// TestI8_RedislockBehavesAsWithoutLockwatch runs the same redislock session
// against a plain client and against a watched client with an attached
// watchdog, and compares every result.
func TestI8_RedislockBehavesAsWithoutLockwatch(t *testing.T) {
	compareTranscripts(t, redislockSession)
}

// TestI8_RedsyncBehavesAsWithoutLockwatch does the same with redsync.
func TestI8_RedsyncBehavesAsWithoutLockwatch(t *testing.T) {
	compareTranscripts(t, redsyncSession)
}

func compareTranscripts(t *testing.T, session func(e *env, say func(string, ...any))) {
	run := func(watched bool) []string {
		var out []string
		bubble(t, func(t *testing.T) {
			e := newMiniEnv(t)
			if watched {
				e.attach()
			}
			session(e, func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) })
			if watched {
				if locks := e.Reg.Locks(); len(locks) != 0 {
					t.Errorf("tracked locks after the session: got %d (%v), want 0", len(locks), locks)
				}
			}
		})
		return out
	}
	plain, watched := run(false), run(true)
	if len(plain) != len(watched) {
		t.Fatalf("transcript lengths: got %d with lockwatch, want %d (as without)", len(watched), len(plain))
	}
	for i := range plain {
		if plain[i] != watched[i] {
			t.Errorf("step %d: got %q with lockwatch, want %q (as without)", i, watched[i], plain[i])
		}
	}
	if testing.Verbose() {
		t.Logf("transcript:\n%s", strings.Join(plain, "\n"))
	}
}

// errClass names err by the sentinels it matches (errors.Is) and quotes its
// text: a transcript compares how the application can tell errors apart,
// whichever way an upstream release wraps or joins them (redislock v0.10.0
// joins ErrNotObtained with the context's error), and still shows any
// change of wording between a run with lockwatch and one without.
func errClass(err error) string {
	if err == nil {
		return "nil"
	}
	names := harness.Matching(err, errClassSentinels...)
	if len(names) == 0 {
		names = append(names, fmt.Sprintf("%T", err))
	}
	return fmt.Sprintf("%s %q", strings.Join(names, "+"), err.Error())
}

// errClassSentinels are the errors errClass names an error by.
var errClassSentinels = append(slices.Clone(harness.UpstreamSentinels),
	harness.Sentinel{Name: "context.Canceled", Err: context.Canceled},
	harness.Sentinel{Name: "context.DeadlineExceeded", Err: context.DeadlineExceeded},
	harness.Sentinel{Name: "redis.Nil", Err: redis.Nil})

// getter returns a function that reads key through the spy and describes
// its value and PTTL, naming the values in names (value → name) so that a
// random token reads the same in every run.
func getter(e *env, names map[string]string) func(key string) string {
	return func(key string) string {
		v, ok, pttl := e.state(key)
		if !ok {
			return "(nil)"
		}
		if name, ok := names[v]; ok {
			return fmt.Sprintf("%s PTTL %v", name, pttl)
		}
		return fmt.Sprintf("%q PTTL %v", v, pttl)
	}
}

// redislockSession runs redislock through the situations business code
// meets. Errors are recorded by errClass; values with random tokens by the
// name of the lock that holds them. Some steps answer differently with
// redislock v0.9.4 and v0.10.0 (a refresh to 0 deletes the key with
// v0.9.4; v0.10.0's retry deadline of now + TTL makes it fail with the
// context's deadline and leave the key), but each release answers the same
// with and without lockwatch.
func redislockSession(e *env, say func(string, ...any)) {
	ctx := context.Background()
	names := map[string]string{}
	get := getter(e, names)
	c := redislock.New(e.app)
	l, err := c.Obtain(ctx, "t8:a", time.Second, &redislock.Options{Token: "tok-a", Metadata: "+meta"})
	if err != nil {
		say("obtain: %s", errClass(err))
		return
	}
	say("obtain: key %s token %s metadata %s", l.Key(), l.Token(), l.Metadata())
	say("GET: %s", get("t8:a"))
	ttl, err := l.TTL(ctx)
	say("TTL: %v %s", ttl, errClass(err))
	_, err = c.Obtain(ctx, "t8:a", time.Second, nil)
	say("obtain again, same client: %s", errClass(err))
	_, err = redislock.New(e.app2).Obtain(ctx, "t8:a", time.Second, nil)
	say("obtain again, other client: %s", errClass(err))
	_, err = redislock.New(e.spy).Obtain(ctx, "t8:a", time.Second, nil)
	say("obtain again, unwatched client: %s", errClass(err))
	start := time.Now()
	_, err = c.Obtain(ctx, "t8:a", time.Second, &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 3)})
	say("obtain with 3 retries: %s after %v", errClass(err), time.Since(start))
	l2, err := c.Obtain(ctx, "t8:a", 2*time.Second, &redislock.Options{Token: "tok-a", Metadata: "+other"})
	if err != nil {
		say("re-obtain with the same token: %s", errClass(err))
		return
	}
	say("re-obtain with the same token: metadata %s", l2.Metadata())
	say("GET: %s", get("t8:a"))
	say("release the first lock: %s", errClass(l.Release(ctx)))
	say("refresh the first lock: %s", errClass(l.Refresh(ctx, time.Second, nil)))
	say("GET: %s", get("t8:a"))
	say("refresh: %s", errClass(l2.Refresh(ctx, 3*time.Second, nil)))
	ttl, err = l2.TTL(ctx)
	say("TTL: %v %s", ttl, errClass(err))
	time.Sleep(500 * time.Millisecond)
	_, err = redislock.New(e.spy).Obtain(ctx, "t8:a", time.Second, nil)
	say("obtain after 500ms, unwatched client: %s", errClass(err))
	say("release: %s", errClass(l2.Release(ctx)))
	say("release again: %s", errClass(l2.Release(ctx)))
	say("refresh after release: %s", errClass(l2.Refresh(ctx, time.Second, nil)))
	ttl, err = l2.TTL(ctx)
	say("TTL after release: %v %s", ttl, errClass(err))
	say("GET: %s", get("t8:a"))

	if err := e.spy.Set(ctx, "t8:plain", "x", 0).Err(); err != nil {
		say("SET: %s", errClass(err))
	}
	_, err = c.Obtain(ctx, "t8:plain", time.Second, nil)
	say("obtain a key holding a plain value: %s", errClass(err))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Obtain(cctx, "t8:b", time.Second, nil)
	say("obtain with a cancelled context: %s", errClass(err))
	say("GET: %s", get("t8:b"))

	l3, err := c.Obtain(ctx, "t8:c", 300*time.Millisecond, nil)
	say("obtain c: %s", errClass(err))
	if err == nil {
		names[l3.Token()+l3.Metadata()] = "c's value"
		say("refresh to 0: %s", errClass(l3.Refresh(ctx, 0, nil)))
		say("GET after refresh to 0: %s", get("t8:c"))
		say("release after refresh to 0: %s", errClass(l3.Release(ctx)))
		say("GET after release: %s", get("t8:c"))
	}

	e.mini.SetError(outage)
	_, err = c.Obtain(ctx, "t8:d", time.Second, nil)
	say("obtain while Redis is loading: %s", errClass(err))
	e.mini.SetError("")
	l4, err := c.Obtain(ctx, "t8:d", time.Second, nil)
	say("obtain d: %s", errClass(err))
	if err == nil {
		e.mini.SetError(outage)
		say("release while Redis is loading: %s", errClass(l4.Release(ctx)))
		e.mini.SetError("")
		say("release: %s", errClass(l4.Release(ctx)))
	}
}

func redsyncSession(e *env, say func(string, ...any)) {
	ctx := context.Background()
	get := func(key string) string {
		v, ok, pttl := e.state(key)
		if !ok {
			return "(nil)"
		}
		return fmt.Sprintf("%q PTTL %v", v, pttl)
	}
	value := func(v string) redsync.Option {
		return redsync.WithGenValueFunc(func() (string, error) { return v, nil })
	}
	rs := redsync.New(goredis.NewPool(e.app))
	mu := rs.NewMutex("t8:r", redsync.WithExpiry(2*time.Second), value("val-1"))
	err := mu.Lock()
	say("Lock: %v value %s valid for %v", err, mu.Value(), time.Until(mu.Until()))
	say("GET: %s", get("t8:r"))
	other := rs.NewMutex("t8:r", redsync.WithTries(1), value("val-2"))
	say("TryLock, same client: %v", other.TryLock())
	say("TryLock, other client: %v", redsync.New(goredis.NewPool(e.app2)).NewMutex("t8:r", redsync.WithTries(1)).TryLock())
	say("TryLock, unwatched client: %v", redsync.New(goredis.NewPool(e.spy)).NewMutex("t8:r", redsync.WithTries(1)).TryLock())
	start := time.Now()
	err = rs.NewMutex("t8:r", redsync.WithTries(3), redsync.WithRetryDelay(100*time.Millisecond)).Lock()
	say("Lock with 3 tries: %v after %v", err, time.Since(start))
	ok, err := mu.Extend()
	say("Extend: %v %v valid for %v", ok, err, time.Until(mu.Until()))
	say("GET: %s", get("t8:r"))
	//lint:ignore SA1019 redsync's deprecated Valid is upstream behaviour checked unchanged
	ok, err = mu.Valid()
	say("Valid: %v %v", ok, err)
	ok, err = other.Unlock()
	say("Unlock by the loser: %v %v", ok, err)
	say("GET: %s", get("t8:r"))
	ok, err = other.Extend()
	say("Extend by the loser: %v %v", ok, err)
	ok, err = mu.Unlock()
	say("Unlock: %v %v", ok, err)
	ok, err = mu.Unlock()
	say("Unlock again: %v %v", ok, err)
	ok, err = mu.Extend()
	say("Extend after Unlock: %v %v", ok, err)
	//lint:ignore SA1019 redsync's deprecated Valid is upstream behaviour checked unchanged
	ok, err = mu.Valid()
	say("Valid after Unlock: %v %v", ok, err)
	say("GET: %s", get("t8:r"))

	mu2 := rs.NewMutex("t8:r2", redsync.WithExpiry(time.Second), redsync.WithSetNXOnExtend(), value("val-3"))
	say("Lock r2: %v", mu2.Lock())
	say("DEL r2: %v", e.spy.Del(ctx, "t8:r2").Err())
	ok, err = mu2.Extend()
	say("Extend with SetNX after DEL: %v %v", ok, err)
	say("GET: %s", get("t8:r2"))
	ok, err = mu2.Unlock()
	say("Unlock r2: %v %v", ok, err)

	if err := e.spy.Set(ctx, "t8:plain", "x", 0).Err(); err != nil {
		say("SET: %v", err)
	}
	say("TryLock a key holding a plain value: %v", rs.NewMutex("t8:plain", redsync.WithTries(1)).TryLock())

	e.mini.SetError(outage)
	mu3 := rs.NewMutex("t8:r3", redsync.WithTries(1), value("val-4"))
	say("TryLock while Redis is loading: %v", mu3.TryLock())
	e.mini.SetError("")
	say("TryLock r3: %v", mu3.TryLock())
	e.mini.SetError(outage)
	ok, err = mu3.Unlock()
	say("Unlock while Redis is loading: %v %v", ok, err)
	e.mini.SetError("")
	ok, err = mu3.Unlock()
	say("Unlock r3: %v %v", ok, err)
}

// TestI8_ApplicationSetNXIsNotTracked: the application's own SET NX with an
// expiry, in every spelling, is not mistaken for a lock: nothing is tracked
// and the keys expire.
func TestI8_ApplicationSetNXIsNotTracked(t *testing.T) {
	attached(t, nil, func(t *testing.T, e *env) {
		ctx := context.Background()
		writes := map[string]func(key string) error{
			"SetNX":        func(k string) error { return e.app.SetNX(ctx, k, "v", time.Second).Err() },
			"Do SET NX PX": func(k string) error { return e.app.Do(ctx, "SET", k, "v", "NX", "PX", 1000).Err() },
			"Do set px nx": func(k string) error { return e.app.Do(ctx, "set", k, "v", "px", "1000", "nx").Err() },
			"Do SET NX EX": func(k string) error { return e.app.Do(ctx, "SET", k, "v", "NX", "EX", 1).Err() },
			"SetArgs NX": func(k string) error {
				return e.app.SetArgs(ctx, k, "v", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err()
			},
			"Set with expiry": func(k string) error { return e.app.Set(ctx, k, "v", time.Second).Err() },
			"pipelined SetNX": func(k string) error {
				_, err := e.app.Pipelined(ctx, func(p redis.Pipeliner) error { return p.SetNX(ctx, k, "v", time.Second).Err() })
				return err
			},
			"transaction SetNX": func(k string) error {
				_, err := e.app.TxPipelined(ctx, func(p redis.Pipeliner) error { return p.SetNX(ctx, k, "v", time.Second).Err() })
				return err
			},
		}
		var keys []string
		for name, write := range writes {
			key := "own:" + name
			keys = append(keys, key)
			if err := write(key); err != nil {
				t.Errorf("%s: got %v, want nil", name, err)
			}
		}
		if locks := e.Reg.Locks(); len(locks) != 0 {
			var got []string
			for _, l := range locks {
				got = append(got, l.Key)
			}
			t.Errorf("tracked locks after the application's own writes: got %q, want none", got)
		}
		time.Sleep(time.Second + time.Millisecond)
		for _, k := range keys {
			if v, ok, _ := e.state(k); ok {
				t.Errorf("%q one second after it was written with a 1s expiry: got %q, want it expired", k, v)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Real redis-server, real time.

// TestReal_I2_HeldLocksKeepAThirdOfTheirTTL holds a 100 ms redislock lock
// under the default schedule and a 300 ms redsync lock under "@every 100ms"
// (and the other way round) for 1.5 s each, sampling the TTL every 5 ms.
func TestReal_I2_HeldLocksKeepAThirdOfTheirTTL(t *testing.T) {
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	cases := []struct {
		lib      string
		ttl      time.Duration
		schedule string
	}{
		{lib: "redislock", ttl: 100 * time.Millisecond},
		{lib: "redsync", ttl: 300 * time.Millisecond, schedule: "@every 100ms"},
		{lib: "redislock", ttl: 300 * time.Millisecond, schedule: "@every 100ms"},
		{lib: "redsync", ttl: 200 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/ttl=%v/schedule=%q", c.lib, c.ttl, c.schedule), func(t *testing.T) {
			e := newRealEnv(t)
			var opts []watchdog.Option
			if c.schedule != "" {
				opts = append(opts, watchdog.WithSchedule(c.schedule))
			}
			e.attach(opts...)
			lb := c.lib
			key := "real:i2"
			h := e.mustObtain(lb, e.app, key, c.ttl)
			least := e.watchHeld(key, h.Value, c.ttl, 1500*time.Millisecond, 5*time.Millisecond)
			t.Logf("least PTTL seen %v of %v; stats %+v", least, c.ttl, e.WD.Stats())
			if err := h.Release(context.Background()); err != nil {
				t.Errorf("release: got %v, want nil", err)
			}
		})
	}
}

// TestReal_I3_ReleasedLocksAreNotRenewed: as TestI3_ReleasedLocksAreNotRenewed, on a real server.
func TestReal_I3_ReleasedLocksAreNotRenewed(t *testing.T) {
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			e := newRealEnv(t)
			e.attach()
			checkRelease(t, e, lb, 200*time.Millisecond, 600*time.Millisecond, time.Second, 5*time.Millisecond)
		})
	}
}

// TestReal_I5_LostLocksAreReported: deleted and stolen locks, on a real server.
func TestReal_I5_LostLocksAreReported(t *testing.T) {
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	const ttl = 300 * time.Millisecond
	for _, lb := range libs {
		t.Run(lb+"/deleted", func(t *testing.T) {
			e := newRealEnv(t)
			e.attach()
			checkDeleted(t, e, lb, ttl, period(ttl, defaultEvery))
		})
		t.Run(lb+"/stolen", func(t *testing.T) {
			e := newRealEnv(t)
			e.attach()
			checkStolen(t, e, lb, ttl, period(ttl, defaultEvery))
		})
	}
}

// TestReal_I6_MaxHold: max hold on a real server. The lock is of 600 ms:
// max hold is what is judged here, not how short a lock the watchdog
// keeps on a busy machine. At 200 ms, CI run 135 (-race, four test
// binaries at once, two CPU burners) saw the key expire 1.02 s into the
// watch after this process was woken 58 ms late, short of the third of
// the TTL (67 ms) that makes a run not judged.
func TestReal_I6_MaxHold(t *testing.T) {
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	const ttl, maxHold = 600 * time.Millisecond, 2400 * time.Millisecond
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			e := newRealEnv(t)
			e.attach(watchdog.WithMaxHold(maxHold))
			checkMaxHold(t, e, lb, ttl, maxHold, period(ttl, defaultEvery), 5*time.Millisecond)
		})
	}
}

// holderEnv tells TestHelperHolderProcess, in a child process, what to hold:
// "addr,key,library".
const holderEnv = "LOCKWATCH_HOLDER"

const (
	holderTTL  = 300 * time.Millisecond
	holderLife = 30 * time.Second // the child gives up if nobody kills it
)

// TestHelperHolderProcess is the holder that TestReal_I4_KilledHolderFreesItsLocks
// runs as a child process and kills. It follows the start-up contract,
// obtains a lock, prints "HELD <value>" and keeps working.
func TestHelperHolderProcess(t *testing.T) {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		t.Skip("helper process for TestReal_I4_KilledHolderFreesItsLocks; runs only as its child")
	}
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		t.Fatalf("%s=%q: got %d fields, want addr,key,library", holderEnv, spec, len(parts))
	}
	lb := parts[2]
	if !slices.Contains(libs, lb) {
		t.Fatalf("%s: unknown library %q", holderEnv, parts[2])
	}
	rdb := redis.NewClient(&redis.Options{Addr: parts[0]})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("Watch: got %v, want nil", err)
	}
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 1s"))
	if err != nil {
		t.Fatalf("Attach: got %v, want nil", err)
	}
	defer wd.Stop()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: got %v, want nil", err)
	}
	h, err := harness.Obtain(context.Background(), lb, rdb, parts[1], holderTTL)
	if err != nil {
		t.Fatalf("obtain: got %v, want nil", err)
	}
	fmt.Printf("HELD %s\n", h.Value)
	time.Sleep(holderLife)
	t.Errorf("holder still running after %v, want it killed by the parent", holderLife)
}

// TestReal_I4_KilledHolderFreesItsLocks runs a holder process, checks that
// its 300 ms lock survives more than three TTLs, kills it with SIGKILL and
// checks that the lock is free within its TTL and a contender obtains it.
func TestReal_I4_KilledHolderFreesItsLocks(t *testing.T) {
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	for _, lb := range libs {
		t.Run(lb, func(t *testing.T) {
			e := newRealEnv(t)
			key := "real:i4:" + lb
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolderProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), holderEnv+"="+e.addr+","+key+","+lb)
			var stderr harness.LockedBuffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatalf("StdoutPipe: got %v, want nil", err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatalf("start holder: got %v, want nil", err)
			}
			lines := make(chan string, 16)
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				s := bufio.NewScanner(stdout)
				for s.Scan() {
					select {
					case lines <- s.Text():
					default: // nobody listens any more
					}
				}
			}()
			killed := false
			t.Cleanup(func() {
				if !killed {
					_ = cmd.Process.Kill()
					<-readerDone
					_ = cmd.Wait()
				}
			})

			var value string
			timeout := time.After(20 * time.Second)
			for value == "" {
				select {
				case line := <-lines:
					if v, ok := strings.CutPrefix(line, "HELD "); ok {
						value = v
					}
				case <-readerDone:
					t.Fatalf("holder exited before HELD; stderr:\n%s", stderr.String())
				case <-timeout:
					t.Fatalf("holder printed no HELD line within 20s; stderr:\n%s", stderr.String())
				}
			}
			e.watchHeld(key, value, holderTTL, 4*holderTTL, 5*time.Millisecond)

			if err := cmd.Process.Kill(); err != nil {
				t.Fatalf("SIGKILL holder: got %v, want nil", err)
			}
			killedAt := time.Now()
			killed = true
			<-readerDone
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("holder exit: got %v, want signal: killed", err)
			}
			for {
				_, ok, _ := e.state(key)
				if !ok {
					break
				}
				if time.Since(killedAt) > holderTTL+e.slack+e.lag.Since(killedAt) {
					t.Fatalf("%s still held %v after the holder was killed, want it free within its TTL (%v)%s", key, time.Since(killedAt), holderTTL, e.lag.Note(time.Since(killedAt)))
				}
				time.Sleep(2 * time.Millisecond)
			}
			freed := time.Since(killedAt)
			t.Logf("lock free %v after SIGKILL (TTL %v)", freed, holderTTL)
			c := e.mustObtain(lb, e.spy, key, holderTTL)
			if v, _, _ := e.state(key); v != c.Value {
				t.Errorf("GET after a contender obtained: got %q, want %q", v, c.Value)
			}
		})
	}
}
