package lockwatch_test

// Multi-key locks end to end: redislock v0.10.0's ObtainMulti, used as
// business code uses it, with the start-up contract of DESIGN.md. One lock
// over several keys is one lock (I10): tracked once (registry.Lock.Key is
// its first key, Keys all of them), renewed all-or-none in one script call,
// reported lost once when any key is gone or taken, and then none of its
// keys is renewed again or re-created.
//
// go.mod requires redislock v0.9.4, which has no ObtainMulti: the tests look
// it up at run time on *redislock.Client and skip, saying so, when it is
// absent. Run them with v0.10.0 linked, in a copy of the tree:
//
//	go get github.com/bsm/redislock@v0.10.0 github.com/redis/go-redis/v9@v9.23.0 github.com/go-redsync/redsync/v4@v4.18.1
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -run 'Multi' .
//
// The same environments as compat_test.go: miniredis inside a
// testing/synctest bubble (TestMulti*) and a real redis-server or Redis
// Cluster in real time (TestRealMulti*, TestRealClusterMulti*).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// multiObtainer is (*redislock.Client).ObtainMulti, which redislock
// v0.10.0 added: one lock over several keys (all in one hash slot on a
// cluster).
type multiObtainer interface {
	ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error)
}

// noObtainMulti is why the multi-key tests skip.
const noObtainMulti = "linked redislock v0.9.4 has no ObtainMulti"

// requireObtainMulti skips t unless the linked redislock has ObtainMulti.
func requireObtainMulti(t testing.TB) {
	t.Helper()
	if _, ok := any((*redislock.Client)(nil)).(multiObtainer); !ok {
		t.Skip(noObtainMulti)
	}
}

// obtainMulti locks keys with ObtainMulti through c, trying once.
func obtainMulti(ctx context.Context, c redislock.RedisClient, keys []string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error) {
	m, ok := any(redislock.New(c)).(multiObtainer)
	if !ok {
		return nil, errors.New(noObtainMulti)
	}
	return m.ObtainMulti(ctx, keys, ttl, opt)
}

// mustObtainMulti locks keys with ObtainMulti through c, or fails the test.
func (e *env) mustObtainMulti(c *redis.Client, keys []string, ttl time.Duration) *redislock.Lock {
	e.t.Helper()
	l, err := obtainMulti(context.Background(), c, keys, ttl, nil)
	if err != nil {
		e.t.Fatalf("ObtainMulti %q for %v: got %v, want nil", keys, ttl, err)
	}
	return l
}

func lockValue(l *redislock.Lock) string { return l.Token() + l.Metadata() }

// states reads the values and remaining TTLs of keys through the spy, all
// at once (MULTI/EXEC).
func (e *env) states(keys []string) map[string]harness.KeyState {
	e.t.Helper()
	e.tick()
	st := harness.ReadKeys(context.Background(), e.spy, keys, harness.Atomic)
	if err := harness.FirstErr(st, keys); err != nil {
		e.t.Fatalf("GET+PTTL of %d keys: got %v, want nil", len(keys), err)
	}
	return st
}

// lockKeys returns every key of every lock, in order.
func lockKeys(locks []heldLock) []string {
	var keys []string
	for _, l := range locks {
		keys = append(keys, l.keys...)
	}
	return keys
}

// heldLock is a lock as the tests know it: its keys, the value stored under
// each, its TTL and how its holder releases it.
type heldLock struct {
	keys    []string
	value   string
	ttl     time.Duration
	release func(context.Context) error
}

func multiHeld(l *redislock.Lock, keys []string, ttl time.Duration) heldLock {
	return heldLock{keys: keys, value: lockValue(l), ttl: ttl, release: l.Release}
}

// watchLocksHeld sleeps step by step for d and checks after every step,
// through the spy and in one read, that every key of every lock still
// holds the lock's value with at least a third of the lock's TTL left (I2).
// It returns the smallest and the largest TTL seen.
func (e *env) watchLocksHeld(locks []heldLock, d, step time.Duration) (least, most time.Duration) {
	e.t.Helper()
	keys := lockKeys(locks)
	least = time.Duration(1<<63 - 1)
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(step)
		st := e.states(keys)
		for _, l := range locks {
			for _, k := range l.keys {
				s := st[k]
				switch {
				case !s.Exists:
					e.t.Fatalf("%v after the watch began: %q is gone, want it held with %q (TTL %v)%s", time.Since(start), k, l.value, l.ttl, e.lag.Note(l.ttl))
				case s.Value != l.value:
					e.t.Fatalf("%v after the watch began: GET %q = %q, want %q", time.Since(start), k, s.Value, l.value)
				}
				if tol := e.tolerance(l.ttl); s.PTTL < l.ttl/3-tol {
					e.t.Fatalf("%v after the watch began: PTTL %q = %v, want >= %v (a third of %v, %v tolerance)%s", time.Since(start), k, s.PTTL, l.ttl/3-tol, l.ttl, tol, e.lag.Note(l.ttl))
				}
				least, most = min(least, s.PTTL), max(most, s.PTTL)
			}
		}
	}
	return least, most
}

// renewCalls returns the renew script calls rec recorded after mark.
func renewCalls(rec *harness.SentLog, mark int) [][]string {
	var out [][]string
	for _, c := range rec.After(mark) {
		if c.IsRenew() {
			out = append(out, c.Args)
		}
	}
	return out
}

// callsNaming returns the calls that name any of keys, and complains about
// each one that does not name all of them with value: a multi-key lock is
// renewed in one call, all-or-none.
func callsNaming(t testing.TB, calls [][]string, keys []string, value string) int {
	t.Helper()
	n := 0
	for _, c := range calls {
		args := c[1:]
		named := 0
		for _, k := range keys {
			if slices.Contains(args, k) {
				named++
			}
		}
		if named == 0 {
			continue
		}
		n++
		if named != len(keys) || !slices.Contains(args, value) {
			t.Errorf("renew call %q names %d of the lock's %d keys %q (value %q): want all of them, with the value, in one call", strings.Join(c, " "), named, len(keys), keys, value)
		}
	}
	return n
}

// wantTrackedMulti checks that the registry tracks exactly one lock for
// keys: under its first key, with all its keys, its value and its TTL.
func wantTrackedMulti(t testing.TB, e *env, keys []string, value string, ttl time.Duration) registry.Lock {
	t.Helper()
	var found []registry.Lock
	for _, l := range e.Reg.Locks() {
		for _, k := range keys {
			if l.Key == k || slices.Contains(l.Keys, k) {
				found = append(found, l)
				break
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("tracked locks naming %q: got %d (%+v), want one", keys, len(found), found)
	}
	l := found[0]
	if l.Key != keys[0] || !slices.Equal(l.Keys, keys) || l.Value != value || l.TTL != ttl || l.Source != "redislock" {
		t.Errorf("tracked lock: got Key %q Keys %q Value %q TTL %v Source %q, want %q %q %q %v %q", l.Key, l.Keys, l.Value, l.TTL, l.Source, keys[0], keys, value, ttl, "redislock")
	}
	if got, ok := e.Reg.Get(e.app, keys[0]); !ok || !slices.Equal(got.Keys, keys) {
		t.Errorf("Get(app, %q): got (%+v, %v), want the lock with Keys %q", keys[0], got, ok, keys)
	}
	for _, k := range keys[1:] {
		if got, ok := e.Reg.Get(e.app, k); ok {
			t.Errorf("Get(app, %q), not the lock's first key: got %+v, want nothing (a lock is tracked under its first key)", k, got)
		}
	}
	return l
}

// ---------------------------------------------------------------------------
// (a) One lock, held, released.

// TestMulti_HeldAsOneLockAndReleased: an ObtainMulti lock over three keys
// is tracked as one lock, kept through many TTLs with every key's TTL at or
// above a third (I2), renewed only in calls that name all three keys, by
// nothing but the renew script (I1); after its release it is untracked
// whole, no key exists and nothing names it again (I3).
func TestMulti_HeldAsOneLockAndReleased(t *testing.T) {
	requireObtainMulti(t)
	attached(t, nil, func(t *testing.T, e *env) {
		checkMultiHeldAndReleased(t, e, 100*time.Millisecond, 5*time.Second, 50*100*time.Millisecond, 7*time.Millisecond)
	})
}

// TestRealMulti_HeldAsOneLockAndReleased: as TestMulti_HeldAsOneLockAndReleased, on a real server.
func TestRealMulti_HeldAsOneLockAndReleased(t *testing.T) {
	requireObtainMulti(t)
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	e := newRealEnv(t)
	e.attach()
	checkMultiHeldAndReleased(t, e, 200*time.Millisecond, 1500*time.Millisecond, time.Second, 5*time.Millisecond)
}

func checkMultiHeldAndReleased(t testing.TB, e *env, ttl, hold, after, step time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"multi:{a}:1", "multi:{a}:2", "multi:{a}:3"}
	lk := e.mustObtainMulti(e.app, keys, ttl)
	h := multiHeld(lk, keys, ttl)
	wantTrackedMulti(t, e, keys, h.value, ttl)
	if n := e.Reg.Len(); n != 1 {
		t.Errorf("registry.Len after one ObtainMulti over %d keys: got %d, want 1", len(keys), n)
	}

	mark := e.rec.Mark()
	least, _ := e.watchLocksHeld([]heldLock{h}, hold, step)
	bad, _ := violations(e.rec.After(mark))
	if len(bad) > 0 {
		t.Errorf("commands sent through the watched client while only the watchdog ran: got %q, want only the renew script", bad)
	}
	calls := callsNaming(t, renewCalls(e.rec, mark), keys, h.value)
	l := wantTrackedMulti(t, e, keys, h.value, ttl)
	t.Logf("held %v; least PTTL seen %v of %v; %d renew calls, %d renewals", hold, least, ttl, calls, l.Renewals)
	if calls == 0 || l.Renewals == 0 {
		t.Errorf("renewals while held for %v: got %d calls, %d in the registry, want some", hold, calls, l.Renewals)
	}

	if err := lk.Release(ctx); err != nil {
		t.Fatalf("release: got %v, want nil", err)
	}
	mark = e.rec.Mark()
	if locks := e.Reg.Locks(); len(locks) != 0 {
		t.Errorf("registry right after release: got %+v, want nothing tracked", locks)
	}
	start := time.Now()
	for time.Since(start) < after {
		time.Sleep(step)
		for k, s := range e.states(keys) {
			if s.Exists {
				t.Fatalf("%v after release: %s exists with %q (PTTL %v), want it gone", time.Since(start), k, s.Value, s.PTTL)
			}
		}
	}
	for _, k := range keys {
		if sent := mentioning(e.rec, mark, k, h.value); len(sent) > 0 {
			t.Errorf("commands naming %s and the released lock's value after release returned: got %q, want none", k, sent)
		}
	}
	if evs := e.Lost.All(); len(evs) != 0 {
		t.Errorf("OnLost calls: got %d (first: %v), want none", len(evs), evs[0].Err)
	}
}

// ---------------------------------------------------------------------------
// (b), (c) One key lost: the lock is lost, once, and left alone.

// TestMulti_OneKeyDeleted: an intruder deletes one key of a held
// three-key lock. OnLost is called exactly once for the lock, with
// ErrLockGone, within one renewal period; the lock is untracked; the
// deleted key is never re-created; the other two keys are never renewed
// again (their expiry never moves later) and expire within their TTL; the
// holder's release answers that the lock is not held.
func TestMulti_OneKeyDeleted(t *testing.T) {
	requireObtainMulti(t)
	forLossCases(t, []string{""}, func(t testing.TB, e *env, _ string, ttl, per time.Duration) {
		checkMultiKeyLost(t, e, false, ttl, per)
	})
}

// TestMulti_OneKeyTaken: an intruder overwrites one key of a held
// three-key lock with its own value and TTL. As TestMulti_OneKeyDeleted,
// with ErrLockTaken, and the intruder's value and expiry are never touched,
// not by the watchdog nor by the holder's late release.
func TestMulti_OneKeyTaken(t *testing.T) {
	requireObtainMulti(t)
	forLossCases(t, []string{""}, func(t testing.TB, e *env, _ string, ttl, per time.Duration) {
		checkMultiKeyLost(t, e, true, ttl, per)
	})
}

// TestRealMulti_OneKeyLost: one key deleted, and one key taken, on a real server.
func TestRealMulti_OneKeyLost(t *testing.T) {
	requireObtainMulti(t)
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	const ttl = 300 * time.Millisecond
	for _, taken := range []bool{false, true} {
		name := "deleted"
		if taken {
			name = "taken"
		}
		t.Run(name, func(t *testing.T) {
			e := newRealEnv(t)
			e.attach()
			checkMultiKeyLost(t, e, taken, ttl, period(ttl, defaultEvery))
		})
	}
}

func checkMultiKeyLost(t testing.TB, e *env, taken bool, ttl, per time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"multi:{lost}:1", "multi:{lost}:2", "multi:{lost}:3"}
	victim, others := keys[1], []string{keys[0], keys[2]}
	if taken {
		victim, others = keys[2], keys[:2]
	}
	lk := e.mustObtainMulti(e.app, keys, ttl)
	h := multiHeld(lk, keys, ttl)
	step := per/10 + time.Millisecond
	e.watchLocksHeld([]heldLock{h}, per+per/3, step)

	const intruder = "intruder"
	intruderTTL := 20 * per
	if taken {
		if err := e.spy.Set(ctx, victim, intruder, intruderTTL).Err(); err != nil {
			t.Fatalf("SET %s intruder: got %v, want nil", victim, err)
		}
	} else if err := e.spy.Del(ctx, victim).Err(); err != nil {
		t.Fatalf("DEL %s: got %v, want nil", victim, err)
	}
	lostAt := time.Now()
	intruderExpires := lostAt.Add(intruderTTL)
	// From now on no renewal can extend the other keys (the lock is
	// renewed all-or-none), so their expiry as read now is final.
	expires := map[string]time.Time{}
	for k, s := range e.states(others) {
		if !s.Exists || s.Value != h.value {
			t.Fatalf("%s right after the intruder: got (%q, exists %v), want it held with %q", k, s.Value, s.Exists, h.value)
		}
		expires[k] = time.Now().Add(s.PTTL)
	}

	ev := e.waitLost(keys[0], per+e.slack)
	mark := e.rec.Mark()
	want, notWant, wantName := watchdog.ErrLockGone, watchdog.ErrLockTaken, "ErrLockGone"
	if taken {
		want, notWant, wantName = watchdog.ErrLockTaken, watchdog.ErrLockGone, "ErrLockTaken"
	}
	if !errors.Is(ev.Err, want) || !errors.Is(ev.Err, watchdog.ErrLost) || errors.Is(ev.Err, notWant) {
		t.Errorf("OnLost reason: got %v, want %s (an ErrLost)", ev.Err, wantName)
	}
	if ev.Lock.Key != keys[0] || !slices.Equal(ev.Lock.Keys, keys) || ev.Lock.Value != h.value {
		t.Errorf("OnLost lock: got (Key %q, Keys %q, Value %q), want (%q, %q, %q)", ev.Lock.Key, ev.Lock.Keys, ev.Lock.Value, keys[0], keys, h.value)
	}
	if d, tol := ev.At.Sub(lostAt), e.slack+e.lag.Since(lostAt); d > per+tol {
		t.Errorf("OnLost came %v after the intruder, want within one renewal period (%v)", d, per)
	}
	if locks := e.Reg.Locks(); len(locks) != 0 {
		t.Errorf("registry after OnLost: got %+v, want nothing tracked", locks)
	}

	// The other keys: never renewed again, gone within their TTL.
	for _, k := range others {
		e.watchUntouched(k, h.value, expires[k], false, ttl+per, step)
		if v, ok, pttl := e.state(k); ok {
			t.Errorf("%s %v after its expiry as read when the lock was lost: got %q (PTTL %v), want it expired (not renewed)", k, time.Since(expires[k]), v, pttl)
		}
	}
	// The lost key: the intruder's value and expiry untouched, or gone for good.
	if taken {
		e.watchUntouched(victim, intruder, intruderExpires, false, e.periods(5)*per, step)
	} else {
		e.watchGone(victim, e.periods(10)*per, step)
	}
	for _, k := range keys {
		if sent := mentioning(e.rec, mark, k, h.value); len(sent) > 0 {
			t.Errorf("commands naming %s and the lost lock's value after OnLost: got %q, want none", k, sent)
		}
	}
	if evs := e.Lost.All(); len(evs) != 1 {
		t.Errorf("OnLost calls: got %d, want exactly 1 for the lock", len(evs))
	}

	if err := lk.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Errorf("holder's release of the lost lock: got %v, want redislock.ErrLockNotHeld", err)
	}
	if taken {
		e.watchUntouched(victim, intruder, intruderExpires, false, e.periods(5)*per, step)
	}
	if evs := e.Lost.All(); len(evs) != 1 {
		t.Errorf("OnLost calls after the holder's release: got %d, want exactly 1", len(evs))
	}
	if !taken {
		// Every key is free: a contender takes the lock, and keeps it.
		c, err := obtainMulti(ctx, e.app2, keys, ttl, nil)
		if err != nil {
			t.Fatalf("contender's ObtainMulti on the watched app2: got %v, want nil", err)
		}
		e.watchLocksHeld([]heldLock{multiHeld(c, keys, ttl)}, e.periods(5)*per, step)
		if err := c.Release(ctx); err != nil {
			t.Errorf("contender's release: got %v, want nil", err)
		}
	}
}

// ---------------------------------------------------------------------------
// (d) A refresh by the holder is followed.

// TestMulti_RefreshIsFollowed: the holder refreshes its three-key lock to a
// longer TTL, then to a shorter one. The registry follows each refresh
// (TTL, same keys), and later renewals use the new TTL: after the refresh
// to the longer TTL every key keeps a third of it (which renewals to the
// old TTL could not give), after the refresh to the shorter one no key's
// TTL ever exceeds it (which renewals to the old, longer TTL would).
func TestMulti_RefreshIsFollowed(t *testing.T) {
	requireObtainMulti(t)
	attached(t, nil, func(t *testing.T, e *env) {
		checkMultiRefresh(t, e, 100*time.Millisecond, 600*time.Millisecond, 150*time.Millisecond, 7*time.Millisecond)
	})
}

// TestRealMulti_RefreshIsFollowed: as TestMulti_RefreshIsFollowed, on a real server.
func TestRealMulti_RefreshIsFollowed(t *testing.T) {
	requireObtainMulti(t)
	t.Parallel() // sleeps mostly: overlaps the other real-server tests
	e := newRealEnv(t)
	e.attach()
	checkMultiRefresh(t, e, 300*time.Millisecond, 1200*time.Millisecond, 400*time.Millisecond, 5*time.Millisecond)
}

func checkMultiRefresh(t testing.TB, e *env, ttl, longer, shorter, step time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"multi:{refresh}:1", "multi:{refresh}:2", "multi:{refresh}:3"}
	lk := e.mustObtainMulti(e.app, keys, ttl)
	h := multiHeld(lk, keys, ttl)
	e.watchLocksHeld([]heldLock{h}, 3*ttl, step)

	for _, next := range []time.Duration{longer, shorter} {
		if err := lk.Refresh(ctx, next, nil); err != nil {
			t.Fatalf("refresh from %v to %v: got %v, want nil", h.ttl, next, err)
		}
		before := wantTrackedMulti(t, e, keys, h.value, next)
		h.ttl = next
		least, most := e.watchLocksHeld([]heldLock{h}, 4*next, step)
		t.Logf("after the refresh to %v: PTTL between %v and %v", next, least, most)
		if most > next {
			t.Errorf("after the refresh to %v: a key's PTTL reached %v, want at most %v: a renewal used an older TTL", next, most, next)
		}
		after := wantTrackedMulti(t, e, keys, h.value, next)
		if after.Renewals <= before.Renewals {
			t.Errorf("renewals over 4 TTLs after the refresh to %v: got %d, want more than %d", next, after.Renewals, before.Renewals)
		}
	}
	if err := lk.Release(ctx); err != nil {
		t.Errorf("release: got %v, want nil", err)
	}
	if evs := e.Lost.All(); len(evs) != 0 {
		t.Errorf("OnLost calls: got %d (first: %v), want none", len(evs), evs[0].Err)
	}
}

// ---------------------------------------------------------------------------
// (e) Single-key and multi-key locks together.

// mixCount is how many locks TestMulti_MixedLocksRenewedTogether holds.
const mixCount = 300

// TestMulti_MixedLocksRenewedTogether holds 300 locks at once, with four
// TTLs: a third multi-key redislock locks (two to four keys), a third
// single-key redislock locks, a third redsync mutexes. One Sweep renews
// every one of them in a handful of script calls (every key back to its
// lock's TTL), and all are held, every key with a third of its TTL, until
// they are released.
func TestMulti_MixedLocksRenewedTogether(t *testing.T) {
	requireObtainMulti(t)
	attached(t, nil, func(t *testing.T, e *env) {
		ttls := []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 8 * time.Second}
		checkMixedLocks(t, e, ttls, 5*time.Second, 23*time.Millisecond)
	})
}

// TestRealMulti_MixedLocksRenewedTogether: as
// TestMulti_MixedLocksRenewedTogether, on a real server. It does not run in
// parallel: reading 500 keys every 50 ms and renewing 300 locks loads this
// two-core machine enough to delay the other real-time tests' renewals
// past their TTL/4 wait (and theirs delay its own).
func TestRealMulti_MixedLocksRenewedTogether(t *testing.T) {
	requireObtainMulti(t)
	e := newRealEnv(t)
	e.attach()
	ttls := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 8 * time.Second}
	checkMixedLocks(t, e, ttls, 3*time.Second, 50*time.Millisecond)
}

func checkMixedLocks(t testing.TB, e *env, ttls []time.Duration, hold, step time.Duration) {
	t.Helper()
	ctx := context.Background()
	var locks []heldLock
	multi := map[string][]string{} // first key → keys, for the multi-key locks
	for i := range mixCount {
		ttl := ttls[i%len(ttls)]
		switch i % 3 {
		case 0:
			var keys []string
			for j := range 2 + (i/3)%3 {
				keys = append(keys, fmt.Sprintf("mix:{%d}:%d", i, j))
			}
			l := e.mustObtainMulti(e.app, keys, ttl)
			locks = append(locks, multiHeld(l, keys, ttl))
			multi[keys[0]] = keys
		default:
			lb := libs[i%3-1]
			key := fmt.Sprintf("mix:%s:%d", lb, i)
			h := e.mustObtain(lb, e.app, key, ttl)
			locks = append(locks, heldLock{keys: []string{key}, value: h.Value, ttl: ttl, release: h.Release})
		}
	}
	totalKeys := 0
	for _, l := range locks {
		totalKeys += len(l.keys)
	}
	tracked := e.Reg.Locks()
	if len(tracked) != mixCount {
		t.Fatalf("tracked locks: got %d, want %d (one per lock, whatever its number of keys)", len(tracked), mixCount)
	}
	before := map[string]int64{}
	for _, l := range tracked {
		before[l.Key] = l.Renewals
		want := multi[l.Key]
		if !slices.Equal(l.Keys, want) {
			t.Errorf("tracked lock %s: got Keys %q, want %q", l.Key, l.Keys, want)
		}
	}

	// One sweep renews them all, in a few calls.
	mark := e.rec.Mark()
	swept := time.Now()
	if err := e.WD.Sweep(ctx); err != nil {
		t.Fatalf("Sweep: got %v, want nil", err)
	}
	calls := renewCalls(e.rec, mark)
	st := e.states(lockKeys(locks))
	for _, l := range locks {
		for _, k := range l.keys {
			s := st[k]
			// In a bubble no time passes during the Sweep: the TTL is
			// exactly the lock's. In real time, allow for the time since.
			if tol := e.tolerance(time.Since(swept)) + time.Since(swept); !s.Exists || s.Value != l.value || s.PTTL > l.ttl || s.PTTL < l.ttl-tol {
				t.Errorf("%s right after Sweep: got (%q, exists %v, PTTL %v), want %q with PTTL %v (within %v)", k, s.Value, s.Exists, s.PTTL, l.value, l.ttl, tol)
			}
		}
	}
	for _, l := range e.Reg.Locks() {
		if l.Renewals <= before[l.Key] {
			t.Errorf("tracked lock %s: %d renewals after the Sweep, want more than %d", l.Key, l.Renewals, before[l.Key])
		}
	}
	t.Logf("%d locks over %d keys renewed by one Sweep in %d renew script calls", mixCount, totalKeys, len(calls))
	if len(calls) == 0 || len(calls) >= mixCount/10 {
		t.Errorf("renew script calls during the Sweep of %d locks (%d keys): got %d, want between 1 and %d", mixCount, totalKeys, len(calls), mixCount/10-1)
	}
	for _, l := range locks {
		if len(l.keys) > 1 {
			callsNaming(t, calls, l.keys, l.value)
		}
	}

	least, _ := e.watchLocksHeld(locks, hold, step)
	t.Logf("held %d locks for %v; least PTTL %v; stats %+v", mixCount, hold, least, e.WD.Stats())
	for _, l := range locks {
		if err := l.release(ctx); err != nil {
			t.Errorf("release of %q: got %v, want nil", l.keys, err)
		}
	}
	if n := e.Reg.Len(); n != 0 {
		t.Errorf("tracked locks after every release: got %d, want 0", n)
	}
	if n, err := e.spy.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after every release: got (%d, %v), want (0, nil)", n, err)
	}
	if evs := e.Lost.All(); len(evs) != 0 {
		t.Errorf("OnLost calls: got %d (first: %s %v), want none", len(evs), evs[0].Lock.Key, evs[0].Err)
	}
}

// ---------------------------------------------------------------------------
// Registry events and Locks.

// eventLog subscribes to a registry's events; safe for concurrent use (the
// watchdog publishes drops on its own goroutine).
type eventLog struct {
	mu  sync.Mutex // guards evs
	evs []registry.Event
}

func subscribeEvents(t testing.TB, reg *registry.Registry) *eventLog {
	l := &eventLog{}
	t.Cleanup(reg.Subscribe(func(ev registry.Event) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.evs = append(l.evs, ev)
	}))
	return l
}

// take returns the events since the last take.
func (l *eventLog) take() []registry.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.evs
	l.evs = nil
	return out
}

// wantEvent is one expected event about a redislock lock of app.
type wantEvent struct {
	kind registry.EventKind
	ttl  time.Duration
}

// check takes the events since the last take and compares them with wants:
// each must be about the lock under keys[0] with all of keys (nil for one
// key), value and its TTL, from redislock on app.
func (l *eventLog) check(t testing.TB, e *env, step string, keys []string, value string, wants ...wantEvent) {
	t.Helper()
	got := l.take()
	if len(got) != len(wants) {
		t.Fatalf("%s: got %d events (%+v), want %d", step, len(got), got, len(wants))
	}
	wantKeys := keys
	if len(keys) == 1 {
		wantKeys = nil
	}
	for i, w := range wants {
		lk := got[i].Lock
		if got[i].Kind != w.kind || lk.Key != keys[0] || !slices.Equal(lk.Keys, wantKeys) || (lk.Keys == nil) != (wantKeys == nil) ||
			lk.Value != value || lk.TTL != w.ttl || lk.Source != "redislock" || lk.Client != e.app {
			t.Errorf("%s: event %d: got %v of (Key %q, Keys %q, Value %q, TTL %v, Source %q), want %v of (%q, %q, %q, %v, %q) on app",
				step, i, got[i].Kind, lk.Key, lk.Keys, lk.Value, lk.TTL, lk.Source, w.kind, keys[0], wantKeys, value, w.ttl, "redislock")
		}
	}
}

// obtainWithEvents subscribes to e's registry, then obtains keys with
// ObtainMulti through app for eventTTL and checks the event that tells it;
// it returns the subscription, the lock and its value.
func obtainWithEvents(t testing.TB, e *env, keys []string) (*eventLog, *redislock.Lock, string) {
	t.Helper()
	evs := subscribeEvents(t, e.Reg)
	lk := e.mustObtainMulti(e.app, keys, eventTTL)
	value := lockValue(lk)
	evs.check(t, e, "ObtainMulti", keys, value, wantEvent{registry.EventObtained, eventTTL})
	return evs, lk, value
}

// eventTTL is the TTL of the locks of the event tests: no renewal is due
// while they run.
const eventTTL = time.Minute

// TestMulti_RegistryLocksAndEventsShowKeys: Locks, Get and the events about
// a multi-key lock while it is tracked (obtained, refreshed) and when the
// watchdog drops it after a loss carry the lock under its first key with
// all its keys; a lock over one key has no Keys, whether it was taken with
// Obtain or with ObtainMulti.
func TestMulti_RegistryLocksAndEventsShowKeys(t *testing.T) {
	requireObtainMulti(t)
	attached(t, nil, func(t *testing.T, e *env) {
		ctx := context.Background()
		keys := []string{"ev:{a}:1", "ev:{a}:2", "ev:{a}:3"}
		evs, lk, value := obtainWithEvents(t, e, keys)
		wantTrackedMulti(t, e, keys, value, eventTTL)
		if err := lk.Refresh(ctx, 2*eventTTL, nil); err != nil {
			t.Fatalf("Refresh: got %v, want nil", err)
		}
		evs.check(t, e, "Refresh", keys, value, wantEvent{registry.EventRefreshed, 2 * eventTTL})
		wantTrackedMulti(t, e, keys, value, 2*eventTTL)

		// Lost behind the holder's back, found by a sweep: dropped.
		if err := e.spy.Del(ctx, keys[1]).Err(); err != nil {
			t.Fatalf("DEL: got %v, want nil", err)
		}
		_ = e.WD.Sweep(ctx)
		ev := e.waitLost(keys[0], time.Second)
		if !errors.Is(ev.Err, watchdog.ErrLockGone) || ev.Lock.Key != keys[0] || !slices.Equal(ev.Lock.Keys, keys) {
			t.Errorf("OnLost: got (%v, Key %q, Keys %q), want (ErrLockGone, %q, %q)", ev.Err, ev.Lock.Key, ev.Lock.Keys, keys[0], keys)
		}
		evs.check(t, e, "a sweep finding a key gone", keys, value, wantEvent{registry.EventDropped, 2 * eventTTL})
		if n := e.Reg.Len(); n != 0 {
			t.Errorf("tracked locks after the drop: got %d (%+v), want none", n, e.Reg.Locks())
		}

		// One key, through Obtain or ObtainMulti: no Keys.
		single := e.mustObtainMulti(e.app, []string{"ev:one"}, eventTTL)
		evs.check(t, e, "ObtainMulti of one key", []string{"ev:one"}, lockValue(single), wantEvent{registry.EventObtained, eventTTL})
		plain, err := redislock.New(e.app).Obtain(ctx, "ev:plain", eventTTL, nil)
		if err != nil {
			t.Fatalf("Obtain: got %v, want nil", err)
		}
		evs.check(t, e, "Obtain", []string{"ev:plain"}, lockValue(plain), wantEvent{registry.EventObtained, eventTTL})
		for _, l := range []*redislock.Lock{single, plain} {
			got, ok := e.Reg.Get(e.app, l.Key())
			if !ok || got.Keys != nil || got.Value != lockValue(l) {
				t.Errorf("Get(app, %q): got (%+v, %v), want the lock, with Keys nil", l.Key(), got, ok)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release %s: got %v, want nil", l.Key(), err)
			}
			evs.check(t, e, "Release of "+l.Key(), []string{l.Key()}, lockValue(l), wantEvent{registry.EventReleased, eventTTL})
		}
		if n := len(e.Lost.All()); n != 1 {
			t.Errorf("OnLost calls: got %d, want 1", n)
		}
	})
}

// TestMulti_RegistryEndEventsShowKeys: the events that end a multi-key
// lock's tracking on its holder's command, released (Release) and not held
// (a Refresh that finds a key gone), carry the lock with all its keys, as
// every other event about it does.
func TestMulti_RegistryEndEventsShowKeys(t *testing.T) {
	requireObtainMulti(t)
	attached(t, nil, func(t *testing.T, e *env) {
		ctx := context.Background()
		keys := []string{"ev:{r}:1", "ev:{r}:2", "ev:{r}:3"}
		evs, lk, value := obtainWithEvents(t, e, keys)
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release: got %v, want nil", err)
		}
		evs.check(t, e, "Release", keys, value, wantEvent{registry.EventReleased, eventTTL})

		keys = []string{"ev:{n}:1", "ev:{n}:2", "ev:{n}:3", "ev:{n}:4"}
		lk = e.mustObtainMulti(e.app, keys, eventTTL)
		value = lockValue(lk)
		evs.check(t, e, "ObtainMulti", keys, value, wantEvent{registry.EventObtained, eventTTL})
		if err := e.spy.Del(ctx, keys[3]).Err(); err != nil {
			t.Fatalf("DEL: got %v, want nil", err)
		}
		if err := lk.Refresh(ctx, eventTTL, nil); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("Refresh of a lock missing a key: got %v, want redislock.ErrNotObtained", err)
		}
		evs.check(t, e, "a Refresh finding a key gone", keys, value, wantEvent{registry.EventNotHeld, eventTTL})
		if n := e.Reg.Len(); n != 0 {
			t.Errorf("tracked locks: got %d (%+v), want none", n, e.Reg.Locks())
		}
		if evs := e.Lost.All(); len(evs) != 0 {
			t.Errorf("OnLost calls: got %d, want none (the holder's own commands decided)", len(evs))
		}
	})
}

// ---------------------------------------------------------------------------
// I8 for ObtainMulti.

// TestI8_RedislockMultiBehavesAsWithoutLockwatch runs the same ObtainMulti
// session against a plain client and against a watched client with an
// attached watchdog, and compares every result.
func TestI8_RedislockMultiBehavesAsWithoutLockwatch(t *testing.T) {
	requireObtainMulti(t)
	compareTranscripts(t, redislockMultiSession)
}

func redislockMultiSession(e *env, say func(string, ...any)) {
	ctx := context.Background()
	names := map[string]string{}
	get := getter(e, names)
	gets := func(keys ...string) string {
		var out []string
		for _, k := range keys {
			out = append(out, k+"="+get(k))
		}
		return strings.Join(out, ", ")
	}
	values := func(keys ...string) string {
		var out []string
		for _, k := range keys {
			v, ok, _ := e.state(k)
			switch name, named := names[v]; {
			case !ok:
				out = append(out, k+"=(nil)")
			case named:
				out = append(out, k+"="+name)
			default:
				out = append(out, fmt.Sprintf("%s=%q", k, v))
			}
		}
		return strings.Join(out, ", ")
	}
	m1, m2, m3, m4 := "t8:{m}1", "t8:{m}2", "t8:{m}3", "t8:{m}4"
	l, err := obtainMulti(ctx, e.app, []string{m1, m2, m3}, time.Second, &redislock.Options{Token: "tok-m", Metadata: "+x"})
	say("ObtainMulti m1 m2 m3: %s", errClass(err))
	if err != nil {
		return
	}
	say("key %s token %s metadata %s", l.Key(), l.Token(), l.Metadata())
	say("GET: %s", gets(m1, m2, m3))
	ttl, err := l.TTL(ctx)
	say("TTL: %v %s", ttl, errClass(err))
	_, err = redislock.New(e.app2).Obtain(ctx, m2, time.Second, nil)
	say("Obtain m2, other client: %s", errClass(err))
	_, err = obtainMulti(ctx, e.app, []string{m3, m4}, time.Second, nil)
	say("ObtainMulti m3 m4: %s", errClass(err))
	say("GET: %s", gets(m4))
	start := time.Now()
	_, err = obtainMulti(ctx, e.spy, []string{m4, m1}, time.Second, &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 3)})
	say("ObtainMulti m4 m1 with 3 retries, unwatched client: %s after %v", errClass(err), time.Since(start))
	say("GET: %s", gets(m4))
	say("Refresh to 2s: %s", errClass(l.Refresh(ctx, 2*time.Second, nil)))
	say("GET: %s", gets(m1, m2, m3))
	ttl, err = l.TTL(ctx)
	say("TTL: %v %s", ttl, errClass(err))
	time.Sleep(300 * time.Millisecond)
	_, err = obtainMulti(ctx, e.spy, []string{m1, m2, m3}, time.Second, nil)
	say("ObtainMulti m1 m2 m3 after 300ms, unwatched client: %s", errClass(err))

	say("DEL m2: %s", errClass(e.spy.Del(ctx, m2).Err()))
	ttl, err = l.TTL(ctx)
	say("TTL of a lock missing a key: %v %s", ttl, errClass(err))
	say("Refresh of a lock missing a key: %s", errClass(l.Refresh(ctx, time.Second, nil)))
	say("Release of a lock missing a key: %s", errClass(l.Release(ctx)))
	// Values only: 300 ms after the refresh, a watched lock may or may not
	// have been renewed yet (the fast lane may go a sixth of the TTL early).
	say("values: %s", values(m1, m2, m3))
	l2, err := obtainMulti(ctx, e.app, []string{m1, m3}, 1500*time.Millisecond, &redislock.Options{Token: "tok-m", Metadata: "+y"})
	say("ObtainMulti m1 m3 again with the same token: %s", errClass(err))
	if err == nil {
		say("GET: %s", gets(m1, m2, m3))
		say("Release the first lock: %s", errClass(l.Release(ctx)))
		say("Release: %s", errClass(l2.Release(ctx)))
		say("Release again: %s", errClass(l2.Release(ctx)))
		say("GET: %s", gets(m1, m2, m3))
	}

	l3, err := obtainMulti(ctx, e.app, []string{m1, m2, m4}, 300*time.Millisecond, nil)
	say("ObtainMulti m1 m2 m4: %s", errClass(err))
	if err == nil {
		names[lockValue(l3)] = "l3's value"
		say("GET: %s", gets(m1, m2, m4))
		if err := e.spy.Set(ctx, m4, "intruder", 0).Err(); err != nil {
			say("SET: %s", errClass(err))
		}
		say("Refresh of a lock with a key taken: %s", errClass(l3.Refresh(ctx, time.Second, nil)))
		say("Release of a lock with a key taken: %s", errClass(l3.Release(ctx)))
		say("GET: %s", gets(m1, m2, m4))
		time.Sleep(300 * time.Millisecond)
		say("GET after 300ms: %s", gets(m1, m2, m4))
	}
}

// ---------------------------------------------------------------------------
// (f) A Redis Cluster.

// TestRealClusterMulti_RenewedInOneCall: on a three-master Redis Cluster,
// multi-key locks whose keys share a hash tag (one slot) are tracked as one
// lock each and renewed by one call naming all their keys (a call that
// spanned two slots would fail with CROSSSLOT), next to single-key locks in
// other slots; every key keeps a third of its TTL, nothing fails, nothing
// is lost, and after release nothing names them again.
//
// It does not run in parallel: starting a cluster loads this two-core
// machine enough to delay the other real-time tests' renewals.
func TestRealClusterMulti_RenewedInOneCall(t *testing.T) {
	requireObtainMulti(t)
	cl := testredis.StartCluster(t, testredis.ClusterOptions{Masters: 3})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	spy := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) // never watched
	t.Cleanup(func() { _ = cc.Close(); _ = spy.Close() })
	reg := harness.Watch(t, cc)
	rec := harness.Record(cc)
	a := harness.Attach(t, reg, harness.Config{})
	wd, lost, logs, lag := a.WD, a.Lost, a.Logs, a.Lag
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Locks of a second: those of 300 ms this test had were lost before
	// the watch began in CI run 128 (the newest Go beside the race step
	// and two CPU burners: renewals unanswered after 93 ms, a key gone
	// before its renewal ran), where no watchdog keeps a lock whose
	// server answers later than its TTL.
	const ttl = time.Second
	var locks []heldLock
	masters := map[string]bool{}
	for _, tag := range []string{"job", "invoice", "report", "batch"} {
		keys := []string{"{" + tag + "}:a", "{" + tag + "}:b", "{" + tag + "}:c"}
		l, err := obtainMulti(ctx, cc, keys, ttl, nil)
		if err != nil {
			t.Fatalf("ObtainMulti %q: got %v, want nil", keys, err)
		}
		locks = append(locks, multiHeld(l, keys, ttl))
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			t.Fatalf("MasterForKey %s: %v", keys[0], err)
		}
		masters[node.Options().Addr] = true
	}
	for i := range 6 {
		key := fmt.Sprintf("cluster:single:%d", i)
		l, err := redislock.New(cc).Obtain(ctx, key, ttl, nil)
		if err != nil {
			t.Fatalf("Obtain %s: got %v, want nil", key, err)
		}
		locks = append(locks, heldLock{keys: []string{key}, value: lockValue(l), ttl: ttl, release: l.Release})
	}
	t.Logf("%d multi-key locks on %d of 3 masters, and 6 single-key locks", 4, len(masters))
	if n := reg.Len(); n != len(locks) {
		t.Fatalf("tracked locks: got %d, want %d (one per lock)", n, len(locks))
	}
	for _, l := range locks[:4] {
		got, ok := reg.Get(cc, l.keys[0])
		if !ok || !slices.Equal(got.Keys, l.keys) || got.Value != l.value {
			t.Errorf("Get(cc, %q): got (%+v, %v), want the lock with Keys %q", l.keys[0], got, ok, l.keys)
		}
	}

	// Held for many TTLs, each key read through the unwatched spy.
	mark := rec.Mark()
	start := time.Now()
	least := time.Duration(1<<63 - 1)
	for time.Since(start) < 3*ttl {
		time.Sleep(5 * time.Millisecond)
		for _, l := range locks {
			for _, k := range l.keys {
				v, err := spy.Get(ctx, k).Result()
				pttl := spy.PTTL(ctx, k).Val()
				if err != nil || v != l.value {
					t.Fatalf("%v after the watch began: GET %s = (%q, %v), want %q", time.Since(start), k, v, err, l.value)
				}
				if tol := realSlack + lag.Since(time.Now().Add(-ttl)); pttl < ttl/3-tol {
					t.Fatalf("%v after the watch began: PTTL %s = %v, want >= %v (a third of %v, %v tolerance)", time.Since(start), k, pttl, ttl/3-tol, ttl, tol)
				}
				least = min(least, pttl)
			}
		}
	}
	if err := wd.Sweep(ctx); err != nil {
		t.Fatalf("Sweep: got %v, want nil", err)
	}
	calls := renewCalls(rec, mark)
	for _, l := range locks[:4] {
		if n := callsNaming(t, calls, l.keys, l.value); n == 0 {
			t.Errorf("renew calls naming %q: got none, want some", l.keys)
		}
	}
	st := wd.Stats()
	t.Logf("least PTTL seen %v of %v; %d renew calls; stats: renewals %d, failures %d, lost %d", least, ttl, len(calls), st.Renewals, st.Failures, st.Lost)
	if st.Lost != 0 || len(lost.All()) != 0 {
		t.Errorf("stats: %d lost; OnLost %d: want none", st.Lost, len(lost.All()))
	}
	// A renewal may be retried when this loaded machine keeps its pipeline
	// past the watchdog's wait (a quarter of the TTL); Redis must refuse
	// none (a call spanning two slots would fail with CROSSSLOT).
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "renewal failed") && !strings.Contains(line, "renewal pipeline gave no answer within") {
			t.Errorf("watchdog log: %s; want no renewal refused by Redis", line)
		}
	}

	for _, l := range locks {
		if err := l.release(ctx); err != nil {
			t.Errorf("release of %q: got %v, want nil", l.keys, err)
		}
	}
	mark = rec.Mark()
	if n := reg.Len(); n != 0 {
		t.Errorf("tracked locks after release: got %d, want 0", n)
	}
	time.Sleep(3 * ttl)
	for _, l := range locks {
		for _, k := range l.keys {
			if n := spy.Exists(ctx, k).Val(); n != 0 {
				t.Errorf("EXISTS %s %v after release: got %d, want 0", k, 3*ttl, n)
			}
			if sent := mentioning(rec, mark, k, l.value); len(sent) > 0 {
				t.Errorf("commands naming %s and its released value after release: got %q, want none", k, sent)
			}
		}
	}
}
