package watchdog

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bsm/redislock"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
)

// A short lock that a Sweep call renewed before its lane first listed it
// (a fresh lock, see lane.leaveFresh), and that the next tick can then
// renew in time, is left to the ticks: its fresh mark goes with it. Kept,
// it had every tick pass it over as the fast lane's, while the lane's look
// at its fresh locks found the tick soon enough and listed it nowhere: a
// lock of 3 s under "@every 1s" expired with no renewal failed or loss
// reported (TestNetworkFaultsShortBlackhole, in an experiment that renewed
// short locks at half their TTL: the look came after its Sweep).
func TestFreshLockRenewedBySweepIsLeftToTheTicks(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		m, rdb, w := fastLaneEnv(t, bsmredislock.New(), WithSchedule("@every 1s"))
		ctx := context.Background()
		locker := redislock.New(rdb)
		short, err := locker.Obtain(ctx, "fresh:short", 1500*time.Millisecond, nil) // its look comes first
		if err != nil {
			t.Fatal(err)
		}
		long, err := locker.Obtain(ctx, "fresh:long", 3*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A fresh lock its holder refreshed to a TTL the ticks can keep
		// is theirs too.
		refreshed, err := locker.Obtain(ctx, "fresh:refreshed", 3*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := refreshed.Refresh(ctx, 20*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // the short lock's look, at 500 ms, comes after the Sweep
		if err := w.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, k := range []string{"fresh:short", "fresh:long"} {
			if !m.Exists(k) {
				t.Errorf("%s expired 5.4 s after its obtain, want it renewed (ticks every 1 s); Stats %+v", k, w.Stats())
			}
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if !m.Exists("fresh:refreshed") {
			t.Errorf("fresh:refreshed expired 25 s after it was refreshed to 20 s, want it renewed by the ticks; Stats %+v", w.Stats())
		}
		if s := w.Stats(); s.Lost != 0 {
			t.Errorf("Stats().Lost = %d, want 0", s.Lost)
		}
		_ = refreshed.Release(ctx)
		_ = short.Release(ctx)
		_ = long.Release(ctx)
	})
}

// The same under the default schedule ("@every 10s"): a lock of 3 s
// (fresh: the fast lane's), refreshed by its holder to 20 s (the ticks'),
// was renewed by no one, and expired 20 s later, still tracked, with no
// loss reported.
func TestFreshLockRefreshedLongerIsRenewedUnderTheDefaultSchedule(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		m, rdb, w := fastLaneEnv(t, bsmredislock.New())
		ctx := context.Background()
		l, err := redislock.New(rdb).Obtain(ctx, "fresh:refreshed", 3*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Refresh(ctx, 20*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(45 * time.Second)
		synctest.Wait()
		if !m.Exists("fresh:refreshed") {
			t.Errorf("fresh:refreshed expired within 45 s of its refresh to 20 s, want it renewed by the ticks; Stats %+v", w.Stats())
		}
		if s := w.Stats(); s.Renewals == 0 || s.Lost != 0 {
			t.Errorf("Stats() = %+v, want renewals and no loss", s)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
