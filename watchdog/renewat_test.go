package watchdog

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bsm/redislock"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
)

// A short lock is renewed when half its TTL has passed, leaving a sixth
// before its deadline (a third left) for the answer, but at least 100 ms or
// a third of its TTL: a lock of 300 ms or less is renewed when a third has
// passed (issue 26: renewing every lock at a third cost the storm of 50,000
// locks a third more renewals, and with a pool of four, deadlines missed).
// The holder's process runs on time here (virtual time): no lag moves a
// renewal earlier.
func TestShortLockRenewedWhenItsAnswerWindowBegins(t *testing.T) {
	for _, tc := range []struct {
		ttl, at time.Duration
	}{
		{3 * time.Second, 1500 * time.Millisecond}, // half
		{1500 * time.Millisecond, 750 * time.Millisecond},
		{450 * time.Millisecond, 200 * time.Millisecond}, // 100 ms before its deadline at 300 ms
		{300 * time.Millisecond, 100 * time.Millisecond}, // a third
		{60 * time.Millisecond, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprint(tc.ttl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, rdb, w := fastLaneEnv(t, bsmredislock.New())
				ctx := context.Background()
				l, err := redislock.New(rdb).Obtain(ctx, "short", tc.ttl, nil)
				if err != nil {
					t.Fatal(err)
				}
				margin := tc.ttl / 50
				time.Sleep(tc.at - margin)
				synctest.Wait()
				if got := w.Stats().Renewals; got != 0 {
					t.Fatalf("a lock of %v renewed %d times %v after its obtain, want none before %v", tc.ttl, got, tc.at-margin, tc.at)
				}
				if left := m.TTL("short"); left < tc.ttl/3 {
					t.Errorf("a lock of %v has %v left before its renewal, want at least a third", tc.ttl, left)
				}
				time.Sleep(2 * margin)
				synctest.Wait()
				if got := w.Stats().Renewals; got != 1 {
					t.Fatalf("a lock of %v renewed %d times %v after its obtain, want once, at %v", tc.ttl, got, tc.at+margin, tc.at)
				}
				if left := m.TTL("short"); left < tc.ttl-2*margin {
					t.Errorf("a lock of %v has %v left just after its renewal, want about its TTL", tc.ttl, left)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
