package watchdog_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// errInjected is an error reply of Redis to one renew call (a script
// error, say): the endpoint answers.
var errInjected error = replyError("ERR injected failure")

type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// chunkFault fails or stalls, once, the renew call (or the whole pipeline)
// that names key.
type chunkFault struct {
	key   string
	stall bool // stall the pipeline until its context ends, instead of failing the call
	armed atomic.Bool
	hits  atomic.Int64
}

func (f *chunkFault) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is for a renew call sent on its own (a pipeline of one call).
func (f *chunkFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	pipe := f.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		return next(ctx, cmds[0])
	})
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := pipe(ctx, []redis.Cmder{cmd}); err != nil {
			return err
		}
		return cmd.Err() // go-redis sets a command's error to what its hook returns
	}
}

func (f *chunkFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var hit redis.Cmder
		for _, cmd := range cmds {
			if names(cmd.Args(), f.key) {
				hit = cmd
			}
		}
		if hit == nil || !f.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		f.hits.Add(1)
		if f.stall { // a node that never answers
			<-ctx.Done()
			for _, cmd := range cmds {
				cmd.SetErr(ctx.Err())
			}
			return ctx.Err()
		}
		err := next(ctx, cmds)
		hit.SetErr(errInjected)
		if err != nil {
			// The server's own error (NOSCRIPT, when the renew script is
			// not loaded yet) must not replace the injected one: the
			// watchdog would resend the call with EVAL, past the fault.
			return errInjected
		}
		return err
	}
}

func names(args []any, key string) bool {
	for _, a := range args {
		if fmt.Sprint(a) == key { // keys are passed as pointers that print as the key
			return true
		}
	}
	return false
}

// One failing chunk delays no other chunk of its tick, and its locks are
// retried through the fast lane well before the next tick (Redisson ends the
// whole renewal at the first failed chunk).
func TestFailedChunkDelaysNoOtherChunk(t *testing.T) {
	for _, stall := range []bool{false, true} {
		name := map[bool]string{false: "error", true: "stalled pipeline"}[stall]
		t.Run(name, func(t *testing.T) {
			watchdog.Bubble(t, func(t *testing.T) {
				const (
					locks = 200
					chunk = 10
					ttl   = time.Minute
				)
				e := newEnv(t)
				fault := &chunkFault{key: "iso:077", stall: stall}
				e.rdb.AddHook(fault)
				lost := &lossLog{}
				wd := attach(t, e.reg, watchdog.WithSchedule("@every 1h"), watchdog.WithChunkSize(chunk),
					watchdog.WithTimeout(200*time.Millisecond), watchdog.WithOnLost(lost.onLost))
				for i := range locks {
					e.obtain(t, fmt.Sprintf("iso:%03d", i), "me", ttl)
				}
				time.Sleep(time.Second) // renewals now show as a later ConfirmedAt
				fault.armed.Store(true)
				start := time.Now()
				err := wd.Sweep(context.Background())
				took := time.Since(start)
				if fault.hits.Load() != 1 {
					t.Fatalf("the fault hit %d pipelines, want 1", fault.hits.Load())
				}
				if err == nil {
					t.Errorf("Sweep() = nil, want the failed chunk's error")
				}
				// The other chunks go at once, beside the stalled call, not
				// after its timeout (200 ms).
				// A stalled call is hedged after the timeout: its locks are
				// sent again at once, in smaller calls, and confirmed then.
				renewedAtStart, failed := 0, 0
				for _, l := range e.reg.Locks() {
					after := l.ConfirmedAt.Sub(start)
					switch {
					case l.ConfirmedAt.Before(start):
						failed++
					case after <= 5*time.Millisecond:
						renewedAtStart++
					case stall && after >= 200*time.Millisecond && after <= 205*time.Millisecond:
						failed++ // hedged
					default:
						t.Errorf("%s confirmed at %v, %v after the sweep began: held up by the failed chunk", l.Key, l.ConfirmedAt, l.ConfirmedAt.Sub(start))
					}
				}
				// An error fails one call (one chunk); a stalled one is
				// hedged (a call is sent on its own).
				wantFailed := chunk
				if stall {
					if took < 200*time.Millisecond {
						t.Errorf("Sweep took %v, want it to wait out the 200ms timeout", took)
					}
				}
				if failed != wantFailed || renewedAtStart != locks-wantFailed {
					t.Errorf("renewed at the sweep's start: %d, not renewed: %d; want %d and %d", renewedAtStart, failed, locks-wantFailed, wantFailed)
				}
				// The fast lane retries the failed locks within a second
				// (retryDelay caps at 1s), not at the next tick (an hour).
				time.Sleep(1500 * time.Millisecond)
				for _, l := range e.reg.Locks() {
					if !l.ConfirmedAt.After(start.Add(-time.Nanosecond)) {
						t.Errorf("%s last confirmed %v before the sweep: not retried", l.Key, start.Sub(l.ConfirmedAt))
					}
				}
				if keys, _ := lost.get(); len(keys) != 0 {
					t.Errorf("OnLost for %v, want none", keys)
				}
				if st := wd.Stats(); st.Failures == 0 || stall && st.Hedges != 1 {
					t.Errorf("Stats(): Failures %d, Hedges %d; want the failure counted, and a stalled call hedged once", st.Failures, st.Hedges)
				}
			})
		})
	}
}
