package ownership_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestLostCauseMatchesErrLost: the README's way of telling a job that its
// lock is gone,
//
//	if cause := context.Cause(jobCtx); errors.Is(cause, watchdog.ErrLost) { ... }
//
// must hold for every way the lock can be lost, and for none of the ways
// it ends without a loss. A redislock lock's wd.Context ends because:
//
//   - "unreachable": the server is SIGSTOPped past the TTL (500 ms): the
//     cause matches ErrLost (and, as the README says, ErrUnreachable);
//   - "max-hold": WithMaxHold(1s) with a 300 ms lock: ErrMaxHold, not ErrLost;
//   - "released": the holder released it: ErrReleased, not ErrLost;
//   - "stopped": wd.Stop(): ErrStopped, not ErrLost.
//
// The sentinels are also compared directly, with an *UnreachableError (the
// reason OnLost gets) standing for ErrUnreachable.
func TestLostCauseMatchesErrLost(t *testing.T) {
	t.Run("sentinels", func(t *testing.T) {
		for _, c := range []struct {
			name string
			err  error
			lost bool
		}{
			{"*UnreachableError", &watchdog.UnreachableError{Endpoint: "127.0.0.1:6379", Err: io.ErrUnexpectedEOF}, true},
			{"ErrMaxHold", watchdog.ErrMaxHold, false},
			{"ErrReleased", watchdog.ErrReleased, false},
			{"ErrStopped", watchdog.ErrStopped, false},
		} {
			if got := errors.Is(c.err, watchdog.ErrLost); got != c.lost {
				t.Errorf("errors.Is(%s, ErrLost) = %v, want %v", c.name, got, c.lost)
			}
		}
	})
	for _, c := range []struct {
		name string
		ttl  time.Duration
		opts []watchdog.Option
		end  func(t *testing.T, srv *testredis.Server, a *app, h *harness.Held) // ends the lock
		want error                                                              // the cause must match it
		lost bool                                                               // and match ErrLost, or not
	}{
		{
			name: "unreachable",
			ttl:  500 * time.Millisecond,
			end:  func(t *testing.T, srv *testredis.Server, _ *app, _ *harness.Held) { srv.Pause(t) },
			want: watchdog.ErrUnconfirmed, // told before it may expire (I15); OnLost says ErrUnreachable later
			lost: true,
		},
		{
			name: "max-hold",
			ttl:  300 * time.Millisecond,
			opts: []watchdog.Option{watchdog.WithMaxHold(time.Second)},
			end:  func(*testing.T, *testredis.Server, *app, *harness.Held) {},
			want: watchdog.ErrMaxHold,
		},
		{
			name: "released",
			ttl:  time.Second,
			end: func(t *testing.T, _ *testredis.Server, _ *app, h *harness.Held) {
				if err := h.Release(context.Background()); err != nil {
					t.Fatalf("release of %v: got %v, want nil", h, err)
				}
			},
			want: watchdog.ErrReleased,
		},
		{
			name: "stopped",
			ttl:  time.Second,
			end:  func(_ *testing.T, _ *testredis.Server, a *app, _ *harness.Held) { a.WD.Stop() },
			want: watchdog.ErrStopped,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := testredis.Start(t)
			rdb := harness.Client(t, srv.Addr)
			a := newApp(t, []redis.UniversalClient{rdb}, c.opts...)
			h := harness.MustObtain(t, harness.Redislock, rdb, "own:cause:"+c.name, c.ttl)
			t.Cleanup(func() { harness.ReleaseQuietly(h) })
			t.Cleanup(func() { srv.Resume(t) }) // before the release, Stop, and the client's Close
			jobCtx, cancel := a.WD.Context(context.Background(), h.Key)
			defer cancel()
			time.Sleep(100 * time.Millisecond)
			if cause := context.Cause(jobCtx); cause != nil {
				t.Fatalf("wd.Context(%q) ended with %s before the test ended the lock, want it running", h.Key, reasonName(cause))
			}
			c.end(t, srv, a, h)
			select {
			case <-jobCtx.Done():
			case <-time.After(3 * time.Second):
				t.Fatalf("wd.Context(%q) not cancelled within 3s, want it cancelled with %v", h.Key, c.want)
			}
			cause := context.Cause(jobCtx)
			if !errors.Is(cause, c.want) {
				t.Errorf("context.Cause(jobCtx) = %s, want a cause matching %v", reasonName(cause), c.want)
			}
			if got := errors.Is(cause, watchdog.ErrLost); got != c.lost {
				t.Errorf("errors.Is(context.Cause(jobCtx), ErrLost) = %v for %s, want %v", got, reasonName(cause), c.lost)
			}
		})
	}
}
