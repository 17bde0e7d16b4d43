package watchdog_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// askings are the ways a job hears of its lock: asking Err, asking
// Cause (which asks Value), or only waiting on Done (select, or a library
// that takes the context), which asks nothing: the context looks at the
// lock by itself at its tell time.
var askings = []struct {
	name string
	told func(context.Context) bool
}{
	{"Err", func(ctx context.Context) bool { return ctx.Err() != nil }},
	{"Cause", func(ctx context.Context) bool { return context.Cause(ctx) != nil }},
	{"Done", func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return true
		default:
			return false
		}
	}},
}

// A job that asks its context whether it may still act is answered from
// the clock, not from when the scheduler runs: past the lock's tell time
// with no renewal confirmed, Err (or context.Cause) tells it then and
// there, before the key may expire (I15), however late the host runs the
// scheduler. Issue 26 found holders told late when the host did not run
// the scheduler's thread (counted in Stats().ToldLate, not prevented).
// Here the holder is cut off from Redis and every scheduler pass runs
// 250 ms after its wake; the job asks every millisecond. It must be told
// by E - d (E: the key's expiry on the server, read at the cut; no renewal
// reaches it after), while the server still holds the key, and the tell
// is counted once, not late. Seen failing without the look on asking:
// told at the scheduler's late pass, after the key had expired. A job
// that waits on Done alone is told in time too (issue 26's gap: it waited
// for the scheduler; seen failing: told 300 ms after the cut, the key's
// PTTL -2 ns).
func TestToldWhenAskedWhileSchedulerLate(t *testing.T) {
	for _, ask := range askings {
		t.Run(ask.name, func(t *testing.T) {
			watchdog.Bubble(t, func(t *testing.T) {
				e := newEnv(t)
				net := &jitterThenCut{}
				e.rdb.AddHook(net)
				wd := attach(t, e.reg)
				defer wd.Stop()
				const ttl = 300 * time.Millisecond
				e.obtain(t, "asked", "me", ttl)
				ctx, cancel := wd.Context(context.Background(), "asked")
				defer cancel()
				time.Sleep(150 * time.Millisecond) // renewed once, at a third of the TTL
				synctest.Wait()
				cut := time.Now()
				expires := cut.Add(e.pttl("asked"))
				net.cut.Store(cut.UnixNano())
				defer watchdog.SetPassDelay(250 * time.Millisecond)()
				var told time.Time
				var pttl time.Duration
				for time.Since(cut) < 3*ttl {
					if ask.told(ctx) {
						told, pttl = time.Now(), e.pttl("asked")
						break
					}
					time.Sleep(time.Millisecond)
				}
				if told.IsZero() {
					t.Fatalf("not told within %v of the cut", 3*ttl)
				}
				bound := expires.Add(-(ttl/100 + 2*time.Millisecond))
				if told.After(bound) || pttl <= 0 {
					t.Errorf("told %v after the cut (the key's PTTL then %v), want by E - d = %v, while the server holds the key", told.Sub(cut), pttl, bound.Sub(cut))
				}
				if c := context.Cause(ctx); !errors.Is(c, watchdog.ErrUnconfirmed) {
					t.Errorf("cause %v, want ErrUnconfirmed", c)
				}
				time.Sleep(time.Second) // the late passes come and go
				synctest.Wait()
				if st := wd.Stats(); st.Unconfirmed != 1 || st.ToldLate != 0 {
					t.Errorf("Stats: Unconfirmed %d, ToldLate %d; want 1 and 0 (told once, in time)", st.Unconfirmed, st.ToldLate)
				}
			})
		})
	}
}

// Asking does not tell a lock renewed in time: a job asking its context
// every millisecond through three TTLs of a lock Redis keeps confirming is
// never told, and nothing is counted.
func TestAskingKeepsConfirmedLock(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		wd := attach(t, e.reg)
		defer wd.Stop()
		const ttl = 300 * time.Millisecond
		e.obtain(t, "kept", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "kept")
		defer cancel()
		start := time.Now()
		for time.Since(start) < 3*ttl {
			if err := ctx.Err(); err != nil {
				t.Fatalf("told %v after the obtain (%v) while Redis confirmed every renewal", time.Since(start), context.Cause(ctx))
			}
			time.Sleep(time.Millisecond)
		}
		if st := wd.Stats(); st.Unconfirmed != 0 || st.Renewals == 0 {
			t.Errorf("Stats: Unconfirmed %d, Renewals %d; want 0 and some", st.Unconfirmed, st.Renewals)
		}
	})
}

// A redsync mutex over three servers is told when asked by the quorum-th
// copy's tell time (I15 for a Redlock group), with the schedulers late:
// every server stops answering, the job asks every millisecond, or only
// looks at Done (seen failing without the contexts' timers: told at 701
// ms, against a bound of 492 ms).
func TestToldWhenAskedRedlock(t *testing.T) {
	for _, ask := range askings {
		t.Run(ask.name, func(t *testing.T) { toldWhenAskedRedlock(t, ask.told) })
	}
}

func toldWhenAskedRedlock(t *testing.T, asked func(context.Context) bool) {
	watchdog.Bubble(t, func(t *testing.T) {
		reg := registry.New(goredsync.New())
		pools, ms := watchdog.RedlockServers(t, reg, 3)
		wd := attach(t, reg)
		defer wd.Stop()
		const ttl = 600 * time.Millisecond
		mutex := redsync.New(pools...).NewMutex("group", redsync.WithExpiry(ttl), redsync.WithTries(1))
		if err := mutex.Lock(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := wd.Context(context.Background(), "group")
		defer cancel()
		time.Sleep(ttl / 2) // renewed once
		synctest.Wait()
		for _, m := range ms {
			m.SetError("LOADING Redis is loading the dataset in memory")
		}
		defer watchdog.SetPassDelay(ttl / 2)()
		var es []time.Time
		for _, l := range reg.Locks() {
			es = append(es, l.ConfirmedAt.Add(ttl))
		}
		if len(es) != 3 {
			t.Fatalf("tracked copies %d, want 3", len(es))
		}
		slices.SortFunc(es, func(a, b time.Time) int { return b.Compare(a) })
		bound := es[1].Add(-(ttl/100 + 2*time.Millisecond)) // the quorum (2) -th copy's E - d
		start := time.Now()
		var told time.Time
		for time.Since(start) < 3*ttl {
			if asked(ctx) {
				told = time.Now()
				break
			}
			time.Sleep(time.Millisecond)
		}
		if told.IsZero() || told.After(bound) {
			t.Errorf("told at %v (zero: not within 3 TTLs), want by the quorum-th copy's E - d, %v", told.Sub(start), bound.Sub(start))
		}
		if c := context.Cause(ctx); !errors.Is(c, watchdog.ErrUnconfirmed) {
			t.Errorf("cause %v, want ErrUnconfirmed", c)
		}
		for _, m := range ms {
			m.SetError("")
		}
		_, _ = mutex.Unlock()
	})
}
