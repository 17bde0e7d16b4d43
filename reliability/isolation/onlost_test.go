package isolation_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestSlowOnLostDelaysNoRenewal: 50 one-second locks on one server; OnLost
// takes 3 s (an application that logs to a slow sink, or takes a mutex).
// An intruder deletes one of the keys. The deleted lock must be reported
// exactly once, with ErrLockGone, and never re-created; none of the 49
// others may expire or be reported while OnLost runs.
func TestSlowOnLostDelaysNoRenewal(t *testing.T) {
	harness.SkipShort(t, "runs a 3 s OnLost against one-second locks")
	const (
		ttl      = time.Second
		n        = 50
		slowness = 3 * time.Second
		watchFor = slowness + 2*time.Second
	)
	srv := testredis.Start(t)
	c := harness.Client(t, srv.Addr)
	a := newApp(t, []redis.UniversalClient{c}, appConfig{onLostDelay: slowness})
	node := "server " + srv.Addr
	var hs []*harness.Held
	for i := range n {
		key := fmt.Sprintf("iso:slow-onlost:%d", i)
		if i%4 == 3 {
			hs = append(hs, obtainRedsync(t, []redis.UniversalClient{c}, key, ttl, node))
		} else {
			hs = append(hs, obtainRedislock(t, c, key, ttl, node))
		}
	}
	t.Cleanup(func() { harness.ReleaseQuietly(hs...) })
	victim, healthy := hs[0], hs[1:]
	spy := newServerSpy(t, srv.Addr)
	time.Sleep(300 * time.Millisecond)

	deleted := time.Now()
	if n, err := spy.c.Del(context.Background(), victim.Key).Result(); err != nil || n != 1 {
		t.Fatalf("intruder DEL %s = %d, %v, want 1, nil", victim.Key, n, err)
	}
	mon := newMonitor(spy, deleted, hs)
	mon.run(watchFor)

	if lost := mon.lostOnServer(healthy); len(lost) > 0 {
		t.Errorf("%d of %d healthy %v locks expired while OnLost (%v) ran for %s, want none%s; %s:%s",
			len(lost), len(healthy), ttl, slowness, victim.Key, a.Lag.Note(watchFor), lostSummary(a.Lost), mon.describe(lost, a.Lost, 10))
	}
	reported := reportedOf(a.Lost, healthy)
	if len(reported) > 0 {
		t.Errorf("%d of %d healthy locks reported to OnLost, want none:%s", len(reported), len(healthy), mon.describe(reported, a.Lost, 10))
	}
	evs := a.Lost.ForKey(victim.Key)
	switch {
	case len(evs) != 1:
		t.Errorf("the deleted lock %v reported %d times, want exactly once: %s", victim, len(evs), describeLost(a.Lost, victim, deleted))
	case !errors.Is(evs[0].Err, watchdog.ErrLockGone):
		t.Errorf("the deleted lock %v reported with %v, want ErrLockGone", victim, evs[0].Err)
	case evs[0].At.Sub(deleted) > 2*ttl:
		t.Errorf("the deleted lock %v reported %v after the DEL, want within a renewal period (%v)", victim, evs[0].At.Sub(deleted).Round(time.Millisecond), 2*ttl)
	}
	if back := mon.recreated(hs); len(back) > 0 {
		t.Errorf("locks re-created after their key was gone:%s", mon.describe(back, a.Lost, 10))
	}
	if !t.Failed() {
		t.Logf("deleted lock reported once after %v; %d healthy locks kept (least PTTL %v)", evs[0].At.Sub(deleted).Round(time.Millisecond), len(healthy), mon.leastOf(healthy))
	}
}
