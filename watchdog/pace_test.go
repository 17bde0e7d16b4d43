package watchdog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// callMeter counts the renew calls on their way at once through its gate.
type callMeter struct {
	mu             sync.Mutex
	now, most, all int
	// first is when the first renew call came, two when two first were
	// on their way at once.
	first, two time.Time
}

// gate answers every renew call after delay, counting it while it waits;
// other commands pass at once.
func (c *callMeter) gate(delay time.Duration) gate {
	return func(ctx context.Context, cmds ...redis.Cmder) error {
		if _, n := renewKeys(cmds); n == 0 {
			return nil
		}
		c.mu.Lock()
		c.now++
		c.all++
		c.most = max(c.most, c.now)
		if c.first.IsZero() {
			c.first = time.Now()
		}
		if c.now == 2 && c.two.IsZero() {
			c.two = time.Now()
		}
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.now--
			c.mu.Unlock()
		}()
		select {
		case <-time.After(delay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *callMeter) get() (most, all int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most, c.all
}

// A lane sends its second call at once only when a deadline needs it, not
// because more than a call's worth is due: while the call in flight
// answers before any lock due has waited a twelfth of its TTL behind it,
// it is the only one, and the application keeps the rest of its pool.
// Sent whenever a call's worth was due besides the call in flight, the
// second call held half of a pool of four through every storm of short
// locks: in the storm of 20,000 locks of 1.5 s (go run
// ./cmd/lockwatch-bench -cases storm) the application's open-loop p99
// rose +3.9 ms with PoolSize 4 at the median of three rounds, its p50 by
// up to 1.6 ms, and -1.2 ms (within the machine's spread) with one call
// until a lock waits.
//
// 300 locks of 3 s due together, calls answered after 1 ms: their three
// calls go one after the other. Seen failing before the change: two at
// once.
func TestOneCallInFlightWhileNoLockWaits(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		meter := &callMeter{}
		e.rdb.AddHook(meter.gate(time.Millisecond))
		const n = 300
		wd, lost, held := heldLocks(t, e, "k", n, 3*time.Second, 5*time.Second, nil)
		defer wd.Stop()
		most, all := meter.get()
		st := wd.Stats()
		if all < 3*4 {
			t.Fatalf("%d renew calls in 5 s, want each lock renewed every second (3 calls a round); stats %+v", all, st)
		}
		if most != 1 {
			t.Errorf("at most %d renew calls on their way at once, want 1: each answered in 1 ms, no lock waited a twelfth of its TTL (250 ms) behind one; stats %+v", most, st)
		}
		if len(lost) > 0 || held < n || st.DeadlinesMissed > 0 {
			t.Errorf("%d lost (%v), %d of %d held, %d deadlines missed, want none lost, all held, none missed", len(lost), head(lost, 3), held, n, st.DeadlinesMissed)
		}
		for i := range n {
			e.release(t, fmt.Sprintf("k%03d", i), "me")
		}
	})
}

// The second call goes when a deadline needs it: 6,000 locks of 1.5 s due
// together, calls answered after 4 ms. One call at a time renews them in
// 240 ms, and the last of them would wait past a twelfth of the TTL (125
// ms): the second call goes as soon as a call's round trip is known, not
// once the most urgent lock has waited that long, and no deadline is
// missed. Seen failing before readyWaited counted the ready queue: two
// calls at once 125 ms after the first.
func TestSecondCallWhenALockWaits(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		meter := &callMeter{}
		e.rdb.AddHook(meter.gate(4 * time.Millisecond))
		const n = 6000
		wd, lost, held := heldLocks(t, e, "w", n, 1500*time.Millisecond, 3*time.Second, nil)
		defer wd.Stop()
		most, _ := meter.get()
		meter.mu.Lock()
		after := meter.two.Sub(meter.first)
		meter.mu.Unlock()
		st := wd.Stats()
		if most != 2 {
			t.Errorf("at most %d renew calls on their way at once, want 2 (pacedCalls); stats %+v", most, st)
		} else if after > 20*time.Millisecond {
			t.Errorf("two renew calls on their way at once %v after the first, want within 20 ms: one call at a time reaches the last of 6,000 locks due in 240 ms, past a twelfth of their TTL", after)
		}
		if len(lost) > 0 || held < n || st.DeadlinesMissed > 0 {
			t.Errorf("%d lost (%v), %d of %d held, %d deadlines missed, want none lost, all held, none missed", len(lost), head(lost, 3), held, n, st.DeadlinesMissed)
		}
		for i := range n {
			e.releaseQuiet(fmt.Sprintf("w%03d", i), "me")
		}
	})
}

// A tick's sweep keeps one call in flight while it has time: it is paced
// to end half-way to the next tick, and sends more only when its pace so
// far would not. A Sweep call sends as fast as it may: three calls at
// once on a client whose pool holds eight connections or more (go-redis's
// default pool: ten per CPU), two on a smaller pool, half of which the
// application keeps. Sending two whenever a sweep ran held half of a pool
// of four through every sweep of 100,000 locks of 30 s on "@every 2s" (go
// run ./cmd/lockwatch-bench -cases neighbour), 1.0-2.2 s of every 2 s on
// 2026-11-30.
//
// 2,000 locks of 60 s on "@every 2s" (20 calls a sweep), each call
// answered after 2 ms: a tick's sweep needs 40 ms of its second, one call
// at a time. Answered after 100 ms, one call at a time would take 2 s:
// the sweep sends more. Seen failing before the change: two at once in
// the first case; before sweepCalls, two at once during Sweep with the
// default pool.
func TestSweepPacedToItsTick(t *testing.T) {
	const n = 2000
	run := func(t *testing.T, delay time.Duration, sweep bool, pool int) (most, all int) {
		var st watchdog.Stats
		watchdog.Bubble(t, func(t *testing.T) {
			e := newEnvOptions(t, func(o *redis.Options) { o.PoolSize = pool })
			meter := &callMeter{}
			e.rdb.AddHook(meter.gate(delay))
			wd := attach(t, e.reg, watchdog.WithSchedule("@every 2s"))
			for i := range n {
				e.obtain(t, fmt.Sprintf("s%04d", i), "me", time.Minute)
			}
			if sweep {
				if err := wd.Sweep(t.Context()); err != nil {
					t.Fatalf("Sweep: %v", err)
				}
			} else {
				time.Sleep(5 * time.Second) // two ticks
			}
			synctest.Wait()
			most, all = meter.get()
			st = wd.Stats()
			wd.Stop()
			for i := range n {
				e.releaseQuiet(fmt.Sprintf("s%04d", i), "me")
			}
		})
		if all < n/100 {
			t.Fatalf("%d renew calls, want a sweep's worth (%d) at least; stats %+v", all, n/100, st)
		}
		return most, all
	}
	for _, tc := range []struct {
		name  string
		delay time.Duration
		sweep bool // a Sweep call, not ticks
		pool  int  // the client's PoolSize; 0: go-redis's default
		want  int
		why   string
	}{
		{"tick", 2 * time.Millisecond, false, 0, 1, "a tick's sweep of 20 calls of 2 ms has its second to spare"},
		{"late tick", 100 * time.Millisecond, false, 0, 3, "sweepCalls, go-redis's default pool: 20 calls of 100 ms one at a time end past half-way to the next tick"},
		{"Sweep", 2 * time.Millisecond, true, 0, 3, "sweepCalls, go-redis's default pool: a Sweep call sends as fast as it may"},
		{"Sweep, pool of eight", 2 * time.Millisecond, true, 8, 3, "sweepCalls"},
		{"Sweep, pool of four", 2 * time.Millisecond, true, 4, 2, "pacedCalls: the application keeps half of a small pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if most, all := run(t, tc.delay, tc.sweep, tc.pool); most != tc.want {
				t.Errorf("at most %d of %d renew calls on their way at once, want %d (%s)", most, all, tc.want, tc.why)
			}
		})
	}
}

// A tick's sweep whose call in flight is slow to answer does not wait for
// it past its pace: the scheduler wakes when the sweep would fall behind
// and sends its next call beside the slow one. Without that wake the
// sweep's next call waited for the slow one's answer or hedge (up to 5 s
// for long locks), since nothing else started a pass.
//
// 2,000 locks of 60 s on "@every 2s"; the sweep's first call answers
// after 3 s, every other after 2 ms. The second call must go within
// 200 ms of the first (the sweep, 20 calls, is paced to end within 1 s).
// Seen failing without the wake: 3 s.
func TestSweepCallBesideASlowOne(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var mu sync.Mutex
		var starts []time.Time
		e.rdb.AddHook(gate(func(ctx context.Context, cmds ...redis.Cmder) error {
			if _, n := renewKeys(cmds); n == 0 {
				return nil
			}
			mu.Lock()
			starts = append(starts, time.Now())
			first := len(starts) == 1
			mu.Unlock()
			delay := 2 * time.Millisecond
			if first {
				delay = 3 * time.Second
			}
			select {
			case <-time.After(delay):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 2s"))
		const n = 2000
		for i := range n {
			e.obtain(t, fmt.Sprintf("b%04d", i), "me", time.Minute)
		}
		time.Sleep(6 * time.Second) // the first tick, and its sweep's slow call answered
		synctest.Wait()
		mu.Lock()
		got := append([]time.Time(nil), starts...)
		mu.Unlock()
		wd.Stop()
		if len(got) < 2 {
			t.Fatalf("%d renew calls, want a sweep's worth", len(got))
		}
		if after := got[1].Sub(got[0]); after > 200*time.Millisecond {
			t.Errorf("the sweep's second call went %v after its first, which answers after 3 s; want within 200 ms", after)
		}
		for i := range n {
			e.releaseQuiet(fmt.Sprintf("b%04d", i), "me")
		}
	})
}
