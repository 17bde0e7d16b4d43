//lint:file-ignore SA1019 redsync's deprecated Valid and ValidContext are upstream behaviour the suite checks unchanged

package transparency

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// The scenarios of redsync's own tests (lock and unlock on several pools,
// TryLock, a mutex already locked, Extend, Valid, unlocking with a
// transferred value, expiry with and without WithSetNXOnExtend, quorum),
// told again.

// redsyncOf returns a Redsync over one pool per client of the run.
func redsyncOf(r *run) *redsync.Redsync {
	var pools []redsyncredis.Pool
	for _, c := range r.clients {
		pools = append(pools, goredis.NewPool(c))
	}
	return redsync.New(pools...)
}

// acquired returns on how many servers the run's key name holds value.
func (r *run) acquired(name, value string) int {
	r.t.Helper()
	n := 0
	for i, c := range r.admin {
		if r.dead[i] {
			continue
		}
		v, err := c.Get(r.ctx, r.key(name)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			r.t.Fatalf("GET %s on server %d: %v", name, i, err)
		}
		if v == value {
			n++
		}
	}
	return n
}

// okErr records both results of a redsync call that returns (bool, error).
func (r *run) okErr(step string, ok bool, err error, wantOK bool, wantErr string) {
	r.t.Helper()
	r.want(step+": ok", ok, wantOK)
	r.wantErr(step, err, wantErr)
}

// Several mutexes lock at once, each on every pool, then unlock; a second
// mutex on a held key fails with ErrTaken; Valid, Until; a mutex given the
// holder's value unlocks the lock; an unlocked lock does not unlock again.
func TestTransparencyRedsyncLockUnlock(t *testing.T) {
	t.Parallel()
	both(t, 3, 0, func(r *run) {
		rs := redsyncOf(r)
		const n = 8
		type result struct {
			lockErr, unlockErr error
			acquired           int
			unlocked           bool
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := rs.NewMutex(r.key(fmt.Sprintf("mutex-%d", i)))
				res := &results[i]
				if res.lockErr = m.LockContext(r.ctx); res.lockErr != nil {
					return
				}
				res.acquired = r.acquiredNoFatal(m.Name(), m.Value())
				res.unlocked, res.unlockErr = m.UnlockContext(r.ctx)
			}()
		}
		wg.Wait()
		for i, res := range results {
			step := fmt.Sprintf("mutex %d", i)
			r.wantErr(step+" lock", res.lockErr, "nil")
			r.want(step+" acquired on servers", res.acquired, 3)
			r.okErr(step+" unlock", res.unlocked, res.unlockErr, true, "nil")
		}
		r.keys("all unlocked", nil)

		holder := rs.NewMutex(r.key("job"), redsync.WithExpiry(time.Hour))
		before := time.Now()
		r.wantErr("holder locks", holder.LockContext(r.ctx), "nil")
		r.want("until is within the expiry", holder.Until().After(before) && !holder.Until().After(time.Now().Add(time.Hour)), true)
		r.want("acquired on servers", r.acquired("job", holder.Value()), 3)
		valid, err := holder.ValidContext(r.ctx)
		r.okErr("holder valid", valid, err, true, "nil")
		r.settle()
		r.keys("held", map[string]string{holder.Value(): "holder"})
		for i := range r.clients {
			r.wantNear(fmt.Sprintf("PTTL on server %d", i), r.pttl(i, "job"), time.Hour, time.Second)
		}

		other := rs.NewMutex(r.key("job"), redsync.WithTries(3), redsync.WithRetryDelay(20*time.Millisecond))
		r.wantErr("another mutex locks", other.LockContext(r.ctx), "redsync.ErrTaken[0 1 2]")
		// TryLock makes one attempt; up to v4.13 it reports the node errors
		// only when the mutex's own tries are 1 (ErrFailed otherwise), later
		// releases always.
		r.wantErrOneOf("another mutex try-locks", other.TryLockContext(r.ctx), "redsync.ErrFailed", "redsync.ErrTaken[0 1 2]")
		valid, err = other.ValidContext(r.ctx)
		r.okErr("other valid", valid, err, false, "redsync.ErrTaken[0 1 2]")
		r.keys("still held", map[string]string{holder.Value(): "holder"})

		transferred := rs.NewMutex(r.key("job"), redsync.WithValue(holder.Value()))
		ok, err := transferred.UnlockContext(r.ctx)
		r.okErr("unlock with the holder's value", ok, err, true, "nil")
		r.keys("unlocked", nil)
		ok, err = holder.UnlockContext(r.ctx)
		r.okErr("holder unlocks again", ok, err, false,
			`redsync.ErrLockAlreadyExpired+nodes["a node's lock expired" "a node's lock expired" "a node's lock expired"]`)
		valid, err = holder.ValidContext(r.ctx)
		r.okErr("holder valid after unlock", valid, err, false, "redsync.ErrTaken[0 1 2]")
	})
}

// acquiredNoFatal is acquired for goroutines: it reports -1 instead of
// failing.
func (r *run) acquiredNoFatal(key, value string) int {
	n := 0
	for i, c := range r.admin {
		if r.dead[i] {
			continue
		}
		v, err := c.Get(r.ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return -1
		}
		if v == value {
			n++
		}
	}
	return n
}

// TryLock takes a free lock at once and fails at once on a held one;
// Extend resets the expiry on every pool.
func TestTransparencyRedsyncTryLockExtend(t *testing.T) {
	t.Parallel()
	both(t, 3, 0, func(r *run) {
		rs := redsyncOf(r)
		first := rs.NewMutex(r.key("job"))
		second := rs.NewMutex(r.key("job"))
		r.wantErr("first try-locks", first.TryLockContext(r.ctx), "nil")
		r.wantErrOneOf("second try-locks", second.TryLockContext(r.ctx), "redsync.ErrFailed", "redsync.ErrTaken[0 1 2]")
		for i := range r.clients {
			r.wantNear(fmt.Sprintf("PTTL on server %d (default expiry)", i), r.pttl(i, "job"), 8*time.Second, time.Second)
		}
		r.hold(300 * time.Millisecond)
		var before []time.Duration
		for i := range r.clients {
			before = append(before, r.pttl(i, "job"))
		}
		untilBefore := first.Until()
		ok, err := first.ExtendContext(r.ctx)
		r.okErr("first extends", ok, err, true, "nil")
		r.want("until moved on", first.Until().After(untilBefore), true)
		for i := range r.clients {
			after := r.pttl(i, "job")
			r.want(fmt.Sprintf("PTTL on server %d not shorter after extend", i), after >= before[i], true)
			r.wantNear(fmt.Sprintf("PTTL on server %d after extend", i), after, 8*time.Second, 200*time.Millisecond)
		}
		ok, err = second.ExtendContext(r.ctx)
		r.okErr("second extends a lock it does not hold", ok, err, false, "redsync.ErrTaken[0 1 2]")
		r.keys("held by first", map[string]string{first.Value(): "first"})
		ok, err = first.UnlockContext(r.ctx)
		r.okErr("first unlocks", ok, err, true, "nil")
		r.wantErr("second try-locks again", second.TryLockContext(r.ctx), "nil")
		r.keys("held by second", map[string]string{second.Value(): "second"})
		ok, err = second.UnlockContext(r.ctx)
		r.okErr("second unlocks", ok, err, true, "nil")
		r.keys("end", nil)
	})
}

// Quorum over five pools: with k of them already holding the key for
// someone else (a plain SET), Lock succeeds exactly when at least three are
// free, and leaves nothing of its own behind when it fails.
func TestTransparencyRedsyncQuorum(t *testing.T) {
	t.Parallel()
	both(t, 5, 0, func(r *run) {
		rs := redsyncOf(r)
		for mask := range 1 << len(r.clients) {
			name := fmt.Sprintf("quorum-%02d", mask)
			free := 0
			for i, c := range r.admin {
				if mask&(1<<i) == 0 {
					free++
					continue
				}
				if err := c.Set(r.ctx, r.key(name), "clog", 0).Err(); err != nil {
					r.t.Fatal(err)
				}
			}
			// A tenth of the expiry for each server's answer (200 ms; 100 ms
			// by default, see TestTransparencyRedsyncHeldPastTTL).
			m := rs.NewMutex(r.key(name), redsync.WithTries(1), redsync.WithExpiry(2*time.Second), redsync.WithTimeoutFactor(0.1))
			err := m.LockContext(r.ctx)
			step := fmt.Sprintf("mask %05b (%d free)", mask, free)
			if free >= 3 {
				r.wantErr(step+" lock", err, "nil")
				r.want(step+" acquired on servers", r.acquired(name, m.Value()), free)
			} else {
				r.note(step+" lock", "err %s", errKind(err))
				if err == nil {
					r.t.Errorf("%s run: %s: Lock succeeded without a quorum", r.mode, step)
				}
			}
			r.settle()
			r.keys(step, map[string]string{m.Value(): "mutex", "clog": "clog"})
			if err == nil {
				ok, err := m.UnlockContext(r.ctx)
				r.okErr(step+" unlock", ok, err, true, "nil")
			}
			r.keys(step+" after", map[string]string{"clog": "clog"})
		}
	})
}

// Pools that cannot be reached count against the quorum like taken ones:
// three live servers and two dead ones lock, extend and unlock; with one
// live server taken as well there is no quorum.
func TestTransparencyRedsyncFailingPools(t *testing.T) {
	t.Parallel()
	both(t, 3, 2, func(r *run) {
		rs := redsyncOf(r)
		m := rs.NewMutex(r.key("job"), redsync.WithTries(1), redsync.WithExpiry(time.Minute))
		r.wantErr("lock with 3 of 5 pools up", m.LockContext(r.ctx), "nil")
		r.want("acquired on servers", r.acquired("job", m.Value()), 3)
		ok, err := m.ExtendContext(r.ctx)
		r.okErr("extend with 3 of 5 pools up", ok, err, true, "nil")
		valid, err := m.ValidContext(r.ctx)
		r.want("valid with 3 of 5 pools up", valid, true)
		r.note("valid's error", "%s", errKind(err))
		r.settle()
		r.keys("held", map[string]string{m.Value(): "mutex"})
		ok, err = m.UnlockContext(r.ctx)
		r.okErr("unlock with 3 of 5 pools up", ok, err, true, "nil")
		r.keys("unlocked", nil)

		if err := r.admin[0].Set(r.ctx, r.key("job"), "clog", 0).Err(); err != nil {
			r.t.Fatal(err)
		}
		err = m.LockContext(r.ctx)
		r.wantErr("lock with 2 of 5 pools free", err, `nodes["node 0 taken" "node 3 unreachable" "node 4 unreachable"]`)
		r.settle()
		r.keys("after the failed lock", map[string]string{"clog": "clog", m.Value(): "mutex"})
	})
}

// The one difference: held past its expiry, an unwatched mutex's lock
// expires (Extend and Unlock fail, Valid is false, another mutex gets it)
// while a watched one is still held. With WithSetNXOnExtend, Extend
// succeeds either way: redsync re-creates an expired key itself.
func TestTransparencyRedsyncHeldPastTTL(t *testing.T) {
	t.Parallel()
	both(t, 3, 0, func(r *run) {
		const expiry = 500 * time.Millisecond
		rs := redsyncOf(r)
		short := func(name string, opts ...redsync.Option) *redsync.Mutex {
			// redsync waits for each server's SET NX a twentieth of the
			// expiry by default: 25 ms here, which a loaded machine misses
			// with or without lockwatch (CI run 116, newest releases: two
			// of three servers "unreachable" in the watched run's first
			// lock). The obtain is not what this test judges: 250 ms.
			opts = append([]redsync.Option{redsync.WithTimeoutFactor(0.5)}, opts...)
			m := rs.NewMutex(r.key(name), append([]redsync.Option{redsync.WithTries(1), redsync.WithExpiry(expiry)}, opts...)...)
			r.wantErr(name+" locks", m.LockContext(r.ctx), "nil")
			return m
		}
		extended := short("extended")
		unlocked := short("unlocked")
		validated := short("validated")
		setNX := short("setnx", redsync.WithSetNXOnExtend())
		contested := short("contested", redsync.WithSetNXOnExtend())
		r.wantTracked(5 * len(r.clients))
		r.hold(3 * expiry)

		ok, err := extended.ExtendContext(r.ctx)
		r.wantByMode("extend after 3 expiries", fmt.Sprint(ok, " ", errKind(err)), "false redsync.ErrTaken[0 1 2]", "true nil")
		ok, err = unlocked.UnlockContext(r.ctx)
		r.wantByMode("unlock after 3 expiries", fmt.Sprint(ok, " ", errKind(err)), "false redsync.ErrLockAlreadyExpired+"+
			`nodes["a node's lock expired" "a node's lock expired" "a node's lock expired"]`, "true nil")
		valid, err := validated.ValidContext(r.ctx)
		r.wantByMode("valid after 3 expiries", fmt.Sprint(valid, " ", errKind(err)), "false redsync.ErrTaken[0 1 2]", "true nil")
		ok, err = setNX.ExtendContext(r.ctx)
		r.okErr("extend with SET NX after 3 expiries", ok, err, true, "nil")
		r.want("acquired on servers after extend with SET NX", r.acquired("setnx", setNX.Value()), 3)

		rival := rs.NewMutex(r.key("contested"), redsync.WithTries(1))
		err = rival.LockContext(r.ctx)
		r.wantByMode("another mutex locks after 3 expiries", errKind(err), "nil", "redsync.ErrTaken[0 1 2]")
		ok, err = contested.ExtendContext(r.ctx)
		r.wantByMode("extend with SET NX of a lock another mutex took", fmt.Sprint(ok, " ", errKind(err)), "false redsync.ErrTaken[0 1 2]", "true nil")

		// Clean up whatever each run holds, then both must have no key.
		for _, m := range []*redsync.Mutex{extended, unlocked, validated, setNX, contested, rival} {
			if m.Value() != "" && r.acquired(m.Name()[len(r.prefix):], m.Value()) > 0 {
				if ok, err := m.UnlockContext(r.ctx); !ok || err != nil {
					r.t.Errorf("%s run: unlock %s = %v, %v", r.mode, m.Name(), ok, err)
				}
			}
		}
		r.keys("end", nil)
	})
}
