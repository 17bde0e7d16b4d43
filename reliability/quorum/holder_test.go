package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestRedlockHolderExtend: the holder's own Extend of a redsync mutex over
// 5 real servers meets copies an intruder deleted a moment before (before
// the watchdog's next renewal finds them gone): redsync's touch answers 0
// on those servers, 1 on the others.
//
//   - "1 of 5 copies gone": Extend answers true; the mutex is held by 4 of
//     5 servers. As when the watchdog finds the copy gone, the mutex's
//     context must live, OnLost must not be called, and the other copies
//     must be kept (PTTL never under TTL/3) for 2 TTLs, until the holder's
//     Unlock, which cancels the context with ErrReleased.
//   - "3 of 5 copies gone": Extend answers false; 2 of 5 servers hold it.
//     As when the watchdog finds the copies gone, the 2 copies left must
//     be renewed no more: they expire within a TTL, so that another
//     process (a redsync of its own over those 2 servers) takes the mutex
//     within a TTL; and the mutex's context must be cancelled (ErrLost).
func TestRedlockHolderExtend(t *testing.T) {
	harness.SkipShort(t, "watches 1 s mutexes for 2 TTLs after the holder's Extend (about 4 s)")
	t.Parallel()
	lag := lagmeter.Start(t)
	gone := []int{1, 3}
	sideBySide(t, []string{"1 of 5 copies gone: still held", "3 of 5 copies gone: lost"}, func(t *testing.T, ci int) {
		k := gone[ci]
		key := fmt.Sprintf("quorum:extend:%d", k)
		r := newRedlock(t, lag, 5, key, acquire{})
		time.Sleep(ttl / 2)
		event := time.Now()
		for i := range k {
			if err := r.ss[i].spy.Del(context.Background(), key).Err(); err != nil {
				r.fatalf("intruder DEL on %v: %v", r.ss[i], err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, err := r.m.ExtendContext(ctx)
		cancel()
		extended := time.Now()
		t.Logf("deleted the key on %d of 5 servers, then the holder's Extend answered %v (%v) %v later", k, ok, err, extended.Sub(event).Round(time.Microsecond))
		if k < r.quorum {
			if !ok {
				r.fatalf("Extend with %d of 5 copies left answered false (%v), want true", 5-k, err)
			}
			time.Sleep(2 * ttl)
			if !r.checkHeld(fmt.Sprintf("2 TTLs after the holder's Extend found %d of 5 copies gone (it answered true: 4 of 5 servers hold the mutex)", k)) {
				return
			}
			for i := k; i < 5; i++ {
				r.checkKept(i, r.locked, time.Now(), "while a majority held the mutex")
			}
			r.checkNotBack(r.locked)
			unlockHolder(r, nil)
			return
		}
		if ok {
			r.fatalf("Extend with %d of 5 copies left answered true, want false", 5-k)
		}
		if !r.ctx.wait(renewalPeriod + slack + r.a.lateBy(event)) {
			r.errorf("the mutex's context was not cancelled within a renewal period of the Extend that found it lost")
		} else if !errors.Is(r.ctx.cause, watchdog.ErrLost) {
			r.errorf("the mutex's context was cancelled with %v, want a cause matching ErrLost", r.ctx.cause)
		}
		on := r.ss[k:]
		tk := newTaker(t, on, key)
		took := tk.takeBy(extended.Add(2*ttl + slack))
		tookAt := took.at
		if tookAt.IsZero() {
			r.errorf("%v could not take the mutex within 2 TTLs of the holder's failed Extend (last error %v), want it to within a TTL: the copies left were renewed on", tk, took.err)
		} else {
			defer tk.release()
			if limit := ttl + slack + r.a.lateBy(extended); took.late(t, tk, extended, limit, "the holder's failed Extend") {
				r.errorf("%v took the mutex %v after the holder's failed Extend, want within a TTL (%v)", tk, tookAt.Sub(extended).Round(time.Millisecond), limit.Round(time.Millisecond))
			}
		}
		for i := k; i < 5; i++ {
			if rs := r.mon.rises(i, extended.Add(settle+r.a.lateBy(extended)), r.m.Value()); len(rs) > 0 {
				r.safetyf("%v: the copy left was renewed %d times after the holder's Extend found the mutex lost (first at %s, PTTL %v), want never", r.ss[i], len(rs), r.a.rel(rs[0].at), rs[0].PTTL)
			}
		}
		if on := r.trackedOn(); len(on) > 0 {
			r.errorf("after the holder's Extend found the mutex lost, the registry still tracks copies on %s, want none", strings.Join(on, ", "))
		}
		if n := len(r.a.lost.All()); n > 1 {
			r.errorf("OnLost called %d times, want at most once", n)
		}
		if !t.Failed() {
			t.Logf("context cancelled at %s with %v; another process took the mutex %v after the Extend; %s", r.a.rel(r.ctx.doneAt), r.ctx.cause, tookAt.Sub(extended).Round(time.Millisecond), r.a.lost.describe(r.a))
		}
	})
}

// TestQuorumLostErrorCounts: the error a lost Redlock is reported with
// says how many of its servers held it when the quorum was lost, and how
// many were needed ("2 of 5 servers hold it, 3 needed" after 3 of 5 copies
// are deleted). The counts are only in the message: the error's type is
// unexported.
func TestQuorumLostErrorCounts(t *testing.T) {
	t.Parallel()
	lag := lagmeter.Start(t)
	r := newRedlock(t, lag, 5, "quorum:error-counts", acquire{})
	time.Sleep(ttl / 2)
	for i := range 3 {
		if err := r.ss[i].spy.Del(context.Background(), r.key).Err(); err != nil {
			r.fatalf("intruder DEL on %v: %v", r.ss[i], err)
		}
	}
	evs := r.a.lost.waitFor(r.key, ttl+slack)
	if len(evs) == 0 {
		r.fatalf("OnLost not called within a TTL of deleting 3 of 5 copies")
	}
	msg := evs[0].Err.Error()
	if want := "2 of 5 servers hold it, 3 needed"; !strings.Contains(msg, want) {
		r.errorf("OnLost's error reads %q, want it to say %q: 2 copies were still held when the quorum was lost (the watchdog then gave them up)", msg, want)
	}
}
