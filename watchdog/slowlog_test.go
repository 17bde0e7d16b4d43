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
// that writes to a slow disk or across a network), and counts them.
type slowHandler struct {
	per     time.Duration
	records *atomic.Int64
}

func (h slowHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h slowHandler) Handle(context.Context, slog.Record) error {
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
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(failKeys("dead:"))
		var records atomic.Int64
		lost := &lossLog{}
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost), watchdog.WithLogger(slog.New(slowHandler{2 * time.Millisecond, &records})))
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
