package ownership_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestRingShardStalled: a redis.Ring of two shards, A and B (two
// redis-servers), watched. 50 redislock locks of 2 s live on each shard
// (which shard a key went to is read with an unwatched client of each
// server after the obtain). B is SIGSTOPped for 8 s. A Ring's shards are
// separate endpoints (I9): none of the 50 locks on A may be lost (no
// OnLost for them; each key keeps its value with a positive PTTL at every
// sample, every 25 ms), while B's may be lost. Under the default schedule
// (the fast lane renews them) and under "@every 500ms".
func TestRingShardStalled(t *testing.T) {
	harness.SkipShort(t, "holds locks through an 8 s SIGSTOP of a shard")
	const (
		ttl   = 2 * time.Second
		n     = 50
		stall = 8 * time.Second
	)
	for _, c := range []struct {
		name string
		opts []watchdog.Option
	}{
		{"default-schedule", nil},
		{"every-500ms", []watchdog.Option{watchdog.WithSchedule("@every 500ms")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srvA, srvB := testredis.Start(t), testredis.Start(t)
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srvA.Addr, "b": srvB.Addr}})
			t.Cleanup(func() { _ = ring.Close() })
			a := newApp(t, []redis.UniversalClient{ring}, c.opts...)
			t.Cleanup(func() { srvB.Resume(t) }) // before Stop, and before the ring closes
			spyA, spyB := harness.NewSpy(t, srvA.Addr), harness.NewSpy(t, srvB.Addr)

			// Obtain through the ring until each shard holds n locks;
			// a lock on a shard that has its n already is released.
			var onA, onB []*harness.Held
			for i := 0; len(onA) < n || len(onB) < n; i++ {
				if i > 20*n {
					t.Fatalf("after %d obtains through the ring: %d locks on A, %d on B, want %d on each", i, len(onA), len(onB), n)
				}
				h := harness.MustObtain(t, harness.Redislock, ring, fmt.Sprintf("own:ring:%s:%d", c.name, i), ttl)
				inA, errA := spyA.Exists(context.Background(), h.Key).Result()
				inB, errB := spyB.Exists(context.Background(), h.Key).Result()
				if errA != nil || errB != nil || inA+inB != 1 {
					t.Fatalf("EXISTS %s on A, B: got %d, %v and %d, %v, want it on exactly one shard", h.Key, inA, errA, inB, errB)
				}
				switch {
				case inA == 1 && len(onA) < n:
					onA = append(onA, h)
				case inB == 1 && len(onB) < n:
					onB = append(onB, h)
				default:
					harness.ReleaseQuietly(h)
				}
			}
			t.Cleanup(func() { harness.ReleaseQuietly(append(onA, onB...)...) })

			start := time.Now()
			steady := newKeyWatch(spyA, start, onA...)
			steady.run(500*time.Millisecond, nil) // renewals in steady state
			srvB.Pause(t)
			paused := time.Now()
			kw := newKeyWatch(spyA, paused, onA...)
			kw.run(stall, nil)
			srvB.Resume(t)
			t.Logf("shard B %s SIGSTOPped for %v", srvB.Addr, time.Since(paused).Round(time.Millisecond))

			var lostA []*harness.Held
			for _, h := range onA {
				if steady.bad[h] != "" || kw.bad[h] != "" {
					lostA = append(lostA, h)
				}
			}
			if len(lostA) > 0 {
				t.Errorf("%d of %d %v locks on shard A %s were lost on the server (500ms before and while shard B was SIGSTOPped for %v), want none:%s\n%s",
					len(lostA), n, ttl, srvA.Addr, stall, describeBad(lostA, []*keyWatch{steady, kw}, 5), a.describeLost(paused))
			}
			var reportedA []string
			for _, h := range onA {
				for _, ev := range a.Lost.Of(h.Key, h.Value) {
					reportedA = append(reportedA, fmt.Sprintf("%s at %+.3fs: %s", h.Key, ev.At.Sub(paused).Seconds(), reasonName(ev.Err)))
				}
			}
			if got := len(reportedA); got > 0 {
				if got > 5 {
					reportedA = append(reportedA[:5], fmt.Sprintf("... and %d more", got-5))
				}
				t.Errorf("OnLost calls for the locks on shard A: got %d, want 0:\n  %s", got, strings.Join(reportedA, "\n  "))
			}
			least := time.Duration(-1)
			for _, h := range onA {
				if l := kw.least[h]; l >= 0 && (least < 0 || l < least) {
					least = l
				}
			}
			t.Logf("A's %d locks: least PTTL while B was stopped %v; B's %d locks: %d reported lost; Stats: %+v",
				n, least, n, countOf(a.Lost, onB), a.WD.Stats().Losses)
		})
	}
}

// countOf counts the OnLost calls for hs.
func countOf(l *harness.LostLog, hs []*harness.Held) int {
	n := 0
	for _, h := range hs {
		n += len(l.Of(h.Key, h.Value))
	}
	return n
}

// describeBad tells, for at most max of hs, the first sample that did not
// find the holder's value, from whichever watch saw it.
func describeBad(hs []*harness.Held, ws []*keyWatch, max int) string {
	var b strings.Builder
	for i, h := range hs {
		if i == max {
			fmt.Fprintf(&b, "\n  ... and %d more", len(hs)-max)
			break
		}
		for _, w := range ws {
			if bad, ok := w.bad[h]; ok {
				fmt.Fprintf(&b, "\n  %v: %s (from %s)", h, bad, w.since.Format("15:04:05.000"))
				break
			}
		}
	}
	return b.String()
}
