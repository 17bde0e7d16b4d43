package ownership_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/scripts"
)

// releaseCtx is the context the holder gives its release; releaseSlack is
// what the release may take past it (plus the measured lag): go-redis
// returning on a deadline, the hook's own work.
const (
	releaseCtx   = 100 * time.Millisecond
	releaseSlack = 50 * time.Millisecond
)

// renewalHold is a go-redis hook, added after reg.Watch (so inside the
// registry's hook, next to the network), that sees the watchdog's renewal
// of one key go by and, when hold is set, keeps it from the server: a
// slow or lossy network between the watchdog and Redis, for that renewal
// only. A held renewal goes on when its context ends (then failing with
// the context's error, unsent) or when free is closed.
type renewalHold struct {
	key  string
	hold bool

	once sync.Once
	seen chan struct{} // closed when a renewal of key is first seen
	free chan struct{} // closed to let held renewals go
	done sync.Once
}

var _ redis.Hook = (*renewalHold)(nil)

func newRenewalHold(key string, hold bool) *renewalHold {
	return &renewalHold{key: key, hold: hold, seen: make(chan struct{}), free: make(chan struct{})}
}

func (h *renewalHold) release() { h.done.Do(func() { close(h.free) }) }

// isRenewal tells whether cmds hold a call of lockwatch's renew script
// (EVALSHA of its pinned SHA1, or EVAL of its source) that carries h.key.
func (h *renewalHold) isRenewal(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		args := c.Args()
		if len(args) < 3 {
			continue
		}
		name, _ := args[0].(string)
		script, _ := args[1].(string)
		renew := (strings.EqualFold(name, "evalsha") && script == scripts.RenewSHA1) ||
			(strings.EqualFold(name, "eval") && script == scripts.RenewSource())
		if !renew {
			continue
		}
		for _, a := range args[3:] {
			// Keys may be of the watchdog's own types: compare as text.
			if fmt.Sprint(a) == h.key {
				return true
			}
		}
	}
	return false
}

func (h *renewalHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *renewalHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.gate(ctx, []redis.Cmder{cmd}); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *renewalHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.gate(ctx, cmds); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

func (h *renewalHold) gate(ctx context.Context, cmds []redis.Cmder) error {
	if !h.isRenewal(cmds) {
		return nil
	}
	h.once.Do(func() { close(h.seen) })
	if !h.hold {
		return nil
	}
	select {
	case <-h.free:
		return nil
	case <-ctx.Done():
		for _, c := range cmds {
			c.SetErr(ctx.Err())
		}
		return ctx.Err()
	}
}

// TestReleaseDuringRenewal: the holder releases its redislock lock (TTL
// 40 s, so that a renewal's timeout is long: a quarter of the TTL, at most
// 5 s) with a context of 100 ms, while the watchdog's renewal of that key,
// started by wd.Sweep, is in flight and does not answer:
//
//   - "slow-network": a hook holds that renewal back from a healthy
//     server; without lockwatch the release would answer in well under a
//     millisecond;
//   - "paused-server": the server is SIGSTOPped before the sweep; the
//     client honours context deadlines (ContextTimeoutEnabled), so without
//     lockwatch the release would end with its context.
//
// The release must return within its 100 ms plus the measured lag plus
// 50 ms (with or without an error), not wait for the renewal's timeout:
// the holder's context bounds the holder's command (I3's wait for a
// renewal in flight included).
func TestReleaseDuringRenewal(t *testing.T) {
	const ttl = 40 * time.Second
	for _, c := range []struct {
		name  string
		pause bool
	}{
		{"slow-network", false},
		{"paused-server", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := testredis.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			t.Cleanup(func() { srv.Resume(t) }) // before the client closes
			a := newApp(t, []redis.UniversalClient{rdb})
			key := "own:release:" + c.name
			hook := newRenewalHold(key, !c.pause)
			rdb.AddHook(hook)
			t.Cleanup(hook.release)
			lock := harness.MustObtain(t, harness.Redislock, rdb, key, ttl)
			t.Cleanup(func() { harness.ReleaseQuietly(lock) })

			if c.pause {
				srv.Pause(t)
			}
			swept := make(chan struct{})
			var sweepErr error
			go func() {
				defer close(swept)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				sweepErr = a.WD.Sweep(ctx)
			}()
			t.Cleanup(func() {
				hook.release()
				srv.Resume(t)
				select {
				case <-swept:
				case <-time.After(15 * time.Second):
					t.Errorf("wd.Sweep did not return within 15s of the renewal being let go")
				}
			})
			select {
			case <-hook.seen:
			case <-swept:
				t.Fatalf("wd.Sweep returned %v before its renewal of %s was seen, want the renewal in flight", sweepErr, key)
			case <-time.After(3 * time.Second):
				t.Fatalf("no renewal of %s seen within 3s of wd.Sweep, want one in flight", key)
			}
			time.Sleep(20 * time.Millisecond) // the renewal is on its way

			start := time.Now()
			var err error
			returned := harness.Within(10*time.Second, func() {
				ctx, cancel := context.WithTimeout(context.Background(), releaseCtx)
				defer cancel()
				err = lock.Release(ctx)
			})
			took := time.Since(start)
			bound := a.Lag.Bound(releaseCtx+releaseSlack, start)
			switch {
			case !returned:
				t.Fatalf("lock.Release(ctx of %v) with a renewal of its key in flight did not return within 10s, want within %v", releaseCtx, bound)
			case took > bound:
				t.Errorf("lock.Release(ctx of %v) with a renewal of its key in flight returned after %v (err %v), want within %v (%v + measured lag + %v)",
					releaseCtx, took.Round(time.Millisecond), err, bound, releaseCtx, releaseSlack)
			default:
				t.Logf("lock.Release(ctx of %v) returned after %v with err %v", releaseCtx, took.Round(time.Millisecond), err)
			}
		})
	}
}
