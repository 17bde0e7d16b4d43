package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// failKeys is a hook on which every renew call that carries a key with
// prefix fails at once with an error reply, while the others, in the same
// pipeline or not, reach the server.
type failKeys string

func (f failKeys) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f failKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.fails(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (f failKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		pass := cmds[:0:0]
		for _, c := range cmds {
			if !f.fails(c) {
				pass = append(pass, c)
			}
		}
		if len(pass) == 0 {
			return nil
		}
		return next(ctx, pass)
	}
}

// fails fails c, with an error reply, when it is a renew call that
// carries a key with f's prefix.
func (f failKeys) fails(c redis.Cmder) bool {
	keys, _ := renewKeys([]redis.Cmder{c})
	if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, string(f)) }) {
		c.SetErr(errors.New("ERR injected"))
		return true
	}
	return false
}

// slowHandler is a log handler that takes a while for each record (one
// that writes to a slow disk or across a network), and counts them. With
// only set, it is slow for records of that message alone (a sink slow now
// and then) and counts those.
type slowHandler struct {
	per     time.Duration
	records *atomic.Int64
	only    string
}

func (h slowHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h slowHandler) Handle(_ context.Context, r slog.Record) error {
	if h.only != "" && r.Message != h.only {
		return nil
	}
	h.records.Add(1)
	time.Sleep(h.per)
	return nil
}
func (h slowHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h slowHandler) WithGroup(string) slog.Handler      { return h }

// The logger is the application's code: a slow one delays no renewal
// (I9, I13). A lock lost is logged on the reporting goroutine, not by the
// lane's scheduler, which gives up a dead endpoint's locks by the
// hundred at once: under -race beside three other test binaries and two
// CPU burners, the scheduler spent 119-167 ms logging 200-400 losses
// while the locks still held on that endpoint waited, and lost them.
//
// 300 locks of 1 s whose renew calls fail are given up together; 100 of
// 300 ms on the same endpoint are renewed at once; each log record takes
// 2 ms. For 3 s, none of the short ones may be lost. Seen failing before
// the fix.
func TestSlowLoggerDelaysNoRenewal(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(failKeys("dead:"))
		var records atomic.Int64
		lost := &lossLog{}
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost), watchdog.WithLogger(slog.New(slowHandler{per: 2 * time.Millisecond, records: &records})))
		defer wd.Stop()
		const dead, live = 300, 100
		for i := range dead {
			e.obtain(t, fmt.Sprintf("dead:%03d", i), "me", time.Second)
		}
		for i := range live {
			e.obtain(t, fmt.Sprintf("live:%03d", i), "me", 300*time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		keys, _ := lost.get()
		liveLost := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !strings.HasPrefix(k, "live:") })
		held := 0
		for i := range live {
			if e.pttl(fmt.Sprintf("live:%03d", i)) > 0 {
				held++
			}
		}
		st := wd.Stats()
		if len(liveLost) > 0 || held < live {
			t.Errorf("beside %d locks given up at once, with a logger that takes 2 ms a record: %d of %d short locks reported lost (%v), %d still held on the server, want none lost and all held; stats %+v",
				dead, len(liveLost), live, head(liveLost, 3), held, st)
		}
		if got := len(keys) - len(liveLost); got < dead {
			t.Errorf("%d of the %d locks whose renewals fail reported lost, want all (the scenario did not happen); stats %+v", got, dead, st)
		}
		for i := range live {
			e.release(t, fmt.Sprintf("live:%03d", i), "me")
		}
	})
}

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
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var records atomic.Int64
		wd := attach(t, e.reg, watchdog.WithLogger(slog.New(slowHandler{per: 350 * time.Millisecond, records: &records, only: "watchdog: renewed"})))
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
		if records.Load() == 0 {
			t.Errorf("no renewal was logged: the slow logger was never in the way")
		}
		if st := wd.Stats(); st.Lost != 0 || st.DeadlinesMissed != 0 || st.Renewals < 20 {
			t.Errorf("Stats: Lost %d, DeadlinesMissed %d, Renewals %d; want 0, 0 and a renewal every third of the TTL", st.Lost, st.DeadlinesMissed, st.Renewals)
		}
	})
}
