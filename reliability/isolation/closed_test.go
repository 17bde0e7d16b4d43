package isolation_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestClosedClient: the application closes one of two watched clients
// while locks obtained through it are tracked. Each of those locks must be
// reported once, through OnLost, with a reason that matches both
// watchdog.ErrUnreachable and redis.ErrClosed, within its TTL; after the
// last report no command at all may pass through the closed client (it is
// no longer swept); the other client's locks are kept.
func TestClosedClient(t *testing.T) {
	harness.SkipShort(t, "watches a closed client for seconds")
	const (
		ttl = 2 * time.Second
		n   = 10
	)
	srv := testredis.Start(t)
	closing := redis.NewClient(&redis.Options{Addr: srv.Addr})
	other := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = other.Close(); _ = closing.Close() })
	a := newApp(t, []redis.UniversalClient{closing, other}, appConfig{opts: []watchdog.Option{watchdog.WithSchedule("@every 200ms")}})
	sent := harness.Record(closing)
	node := "server " + srv.Addr
	var onClosed, kept []*harness.Held
	for i := range n {
		kc, ko := fmt.Sprintf("iso:closed:closing:%d", i), fmt.Sprintf("iso:closed:other:%d", i)
		if i%4 == 3 {
			onClosed = append(onClosed, obtainRedsync(t, []redis.UniversalClient{closing}, kc, ttl, node+" via the closed client"))
			kept = append(kept, obtainRedsync(t, []redis.UniversalClient{other}, ko, ttl, node+" via the other client"))
		} else {
			onClosed = append(onClosed, obtainRedislock(t, closing, kc, ttl, node+" via the closed client"))
			kept = append(kept, obtainRedislock(t, other, ko, ttl, node+" via the other client"))
		}
	}
	t.Cleanup(func() { harness.ReleaseQuietly(kept...) })
	spy := newServerSpy(t, srv.Addr)
	time.Sleep(300 * time.Millisecond)

	closed := time.Now()
	if err := closing.Close(); err != nil {
		t.Fatalf("Close: got %v, want nil", err)
	}
	mon := newMonitor(spy, closed, kept)
	deadline := closed.Add(ttl + time.Second)
	for time.Now().Before(deadline) {
		mon.sampleOnce()
		time.Sleep(sample)
	}
	missing := waitReported(a.Lost, closing, onClosed, 0)
	if len(missing) > 0 {
		var keys []string
		for _, h := range missing {
			keys = append(keys, h.Key)
		}
		t.Errorf("%d of %d locks of the closed client not reported within %v of Close, want each reported: %v; %s", len(missing), n, ttl+time.Second, keys, lostSummary(a.Lost))
	}
	var last time.Time
	for _, h := range onClosed {
		evs := a.Lost.ForLock(closing, h.Key)
		if len(evs) > 1 {
			t.Errorf("%v reported %d times, want once: %s", h, len(evs), describeLost(a.Lost, h, closed))
		}
		for _, ev := range evs {
			if ev.At.After(last) {
				last = ev.At
			}
			if !errors.Is(ev.Err, watchdog.ErrUnreachable) || !errors.Is(ev.Err, redis.ErrClosed) {
				t.Errorf("%v reported at %+.3fs with %q: errors.Is(ErrUnreachable) = %v, errors.Is(redis.ErrClosed) = %v, want both true; the reason's chain:%s",
					h, ev.At.Sub(closed).Seconds(), ev.Err, errors.Is(ev.Err, watchdog.ErrUnreachable), errors.Is(ev.Err, redis.ErrClosed), testredis.ErrChain(ev.Err))
			}
		}
	}
	if len(missing) == 0 {
		// Several ticks (@every 200ms) and fast-lane rounds after the last
		// report: nothing may pass through the closed client.
		time.Sleep(time.Second)
		if cmds := sent.Since(last); len(cmds) > 0 {
			var b strings.Builder
			for i, c := range cmds {
				if i == 5 {
					fmt.Fprintf(&b, "\n  ... and %d more", len(cmds)-5)
					break
				}
				fmt.Fprintf(&b, "\n  %+.3fs %s", c.At.Sub(closed).Seconds(), c)
			}
			t.Errorf("%d commands passed through the closed client after its last lock was reported (%+.3fs), want none:%s", len(cmds), last.Sub(closed).Seconds(), b.String())
		}
	}
	if lost := mon.lostOnServer(kept); len(lost) > 0 {
		t.Errorf("%d of %d locks of the other client expired, want none; %s:%s", len(lost), n, lostSummary(a.Lost), mon.describe(lost, a.Lost, 10))
	}
	for _, h := range kept {
		if evs := a.Lost.ForLock(other, h.Key); len(evs) > 0 {
			t.Errorf("%v of the other client reported to OnLost, want kept: %s", h, describeLost(a.Lost, h, closed))
		}
	}
	if !t.Failed() {
		t.Logf("%d locks of the closed client reported by %+.3fs; the other client's %d kept (least PTTL %v)", n, last.Sub(closed).Seconds(), n, mon.leastOf(kept))
	}
}
