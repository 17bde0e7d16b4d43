package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/scripts"
	"github.com/lockwatch/lockwatch/watchdog"
)

// unanswered applies every renew call Redis gets while on is true, but
// holds its answer back until the call's context ends: a network that
// carries requests and loses replies, or a process too starved to read
// them.
type unanswered struct{ on func() bool }

func (u unanswered) DialHook(next redis.DialHook) redis.DialHook { return next }

func (u unanswered) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, n := renewKeys([]redis.Cmder{cmd}); n == 0 || !u.on() {
			return next(ctx, cmd)
		}
		_ = next(ctx, cmd) // applied
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

func (u unanswered) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if _, n := renewKeys(cmds); n == 0 || !u.on() {
			return next(ctx, cmds)
		}
		_ = next(ctx, cmds)
		<-ctx.Done()
		for _, c := range cmds {
			c.SetErr(ctx.Err())
		}
		return ctx.Err()
	}
}

// A lock whose renewals went unanswered past E is tried again while its
// key may still be held, not only waited for: Redis applied the renewals
// whose answers were lost, and once it answers again a renewal confirms
// the lock. Locks of 300 ms, the answers lost from 90 ms to 330 ms after
// the obtain (the renewals applied), the key held on the server until
// 300 ms after the last of them. Seen failing before the change: no call
// sent between E and the give-up time, the lock given up as unreachable
// 75 ms after E while Redis held its key for 250 ms more (I12), and lost.
func TestRetriedWhileKeyMayLive(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		// The renew script loaded: EVALSHA is applied at once (a NOSCRIPT
		// reply would make the watchdog send EVAL).
		if err := e.rdb.ScriptLoad(context.Background(), scripts.RenewSource()).Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e.rdb.AddHook(unanswered{on: func() bool {
			d := time.Since(start)
			return d >= 90*time.Millisecond && d < 330*time.Millisecond
		}})
		lost := &lossLog{}
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
		defer wd.Stop()
		const ttl = 300 * time.Millisecond
		e.obtain(t, "k", "me", ttl)
		for range 20 { // 1 s: past the answers' return and three TTLs
			time.Sleep(50 * time.Millisecond)
			synctest.Wait()
			if keys, errs := lost.get(); len(keys) > 0 {
				t.Fatalf("reported lost at +%v: %v %v, want kept (Redis held the key: pttl %v); stats %+v", time.Since(start), keys, errs, e.pttl("k"), wd.Stats())
			}
			if p := e.pttl("k"); p <= 0 {
				t.Fatalf("the key gone at +%v (pttl %v), want it renewed once Redis answers again; stats %+v", time.Since(start), p, wd.Stats())
			}
		}
		e.release(t, "k", "me")
	})
}
