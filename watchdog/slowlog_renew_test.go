package watchdog_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// slowRenewedLog is a log handler that takes block to write each
// "watchdog: renewed" record: a logger whose sink is slow now and then (a
// full pipe, a buffer growing under a lock).
type slowRenewedLog struct {
	block time.Duration
}

func (slowRenewedLog) Enabled(context.Context, slog.Level) bool { return true }
func (h slowRenewedLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "watchdog: renewed" {
		time.Sleep(h.block)
	}
	return nil
}
func (h slowRenewedLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h slowRenewedLog) WithGroup(string) slog.Handler      { return h }

// A renewal Redis confirmed schedules the lock's next renewal before
// anything is logged or observed: the logger and the observers are the
// user's, and a slow one must not hold a lock's next renewal back. A lock
// of 300 ms is kept for 3 s with a logger that takes 350 ms to write each
// renewal's line: no lock lost, no deadline missed. Seen failing when the
// renewal was logged between its confirmation and the next slot (local CI
// run 187: a worker of reliability/exclusion logged a renewal at 22.210
// and sent the next one 75 ms later, after the key's expiry, while its
// scheduler woke on time).
func TestSlowLoggerDoesNotDelayRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		wd := attach(t, e.reg, watchdog.WithLogger(slog.New(slowRenewedLog{block: 350 * time.Millisecond})))
		defer wd.Stop()
		const ttl = 300 * time.Millisecond
		e.obtain(t, "logged", "me", ttl)
		ctx, cancel := wd.Context(context.Background(), "logged")
		defer cancel()
		start := time.Now()
		for time.Since(start) < 3*time.Second {
			if p := e.pttl("logged"); p <= 0 {
				t.Fatalf("the key expired %v after the obtain (PTTL %v): its renewal waited for the logger", time.Since(start), p)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := ctx.Err(); err != nil {
			t.Errorf("the job's context was cancelled (%v), want the lock kept", context.Cause(ctx))
		}
		if st := wd.Stats(); st.Lost != 0 || st.DeadlinesMissed != 0 || st.Renewals < 20 {
			t.Errorf("Stats: Lost %d, DeadlinesMissed %d, Renewals %d; want 0, 0 and a renewal every third of the TTL", st.Lost, st.DeadlinesMissed, st.Renewals)
		}
	})
}
