package isolation_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/faultproxy"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestSentinelFailover: a master, one replica and a sentinel
// (down-after-milliseconds 500, failover-timeout 2000); the application
// locks through a go-redis FailoverClient. The replica replicates through
// an in-process proxy, so that its link alone can be cut.
//
//  1. Two locks (redislock, redsync) are obtained and known to be on the
//     replica: a marker written after them on one connection is
//     acknowledged by WAIT 1, and the replica answers EXISTS for them.
//  2. The replication link is blackholed (nothing reaches the replica, the
//     connection stays open), and a third lock is obtained: the replica
//     does not have it.
//  3. "kill-master": the master is SIGKILLed and the sentinel promotes
//     the replica. "sentinel-failover": SENTINEL FAILOVER promotes the
//     replica and turns the old master, still running, into a replica of
//     it (a full sync from the new master drops the unreplicated key).
//
// The replicated locks must be kept, and renewed on the new master within
// 3 s of the promotion (invariant I9), without the application's help. The
// unreplicated lock is gone: it must be reported exactly once, with
// ErrLockGone, and never re-created on the new master.
func TestSentinelFailover(t *testing.T) {
	harness.SkipShort(t, "waits through a sentinel failover and a 5 s TTL")
	for _, mode := range []string{"kill-master", "sentinel-failover"} {
		t.Run(mode, func(t *testing.T) { sentinelFailover(t, mode) })
	}
}

func sentinelFailover(t *testing.T, mode string) {
	const (
		ttl                 = 5 * time.Second
		renewAfterPromotion = 3 * time.Second
	)
	var link *faultproxy.Proxy
	sn := testredis.StartSentinel(t, testredis.SentinelOptions{
		ReplicaLink: func(master string) string {
			p, err := faultproxy.New(master)
			if err != nil {
				t.Fatalf("faultproxy.New(%s): %v", master, err)
			}
			t.Cleanup(func() { _ = p.Close() })
			link = p
			return p.Addr()
		},
	})
	oldMaster, replica := sn.Master.Addr, sn.Replica.Addr
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.Name, SentinelAddrs: sn.Addrs()})
	t.Cleanup(func() { _ = fc.Close() })
	a := newApp(t, []redis.UniversalClient{fc}, appConfig{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sentinel log:\n%s", sn.Output())
		}
	})

	node := "master " + oldMaster + ", replicated to " + replica
	replicated := []*harness.Held{
		obtainRedislock(t, fc, "iso:sentinel:replicated", ttl, node),
		obtainRedsync(t, []redis.UniversalClient{fc}, "iso:sentinel:replicated-rs", ttl, node),
	}
	t.Cleanup(func() { harness.ReleaseQuietly(replicated...) })
	// WAIT counts the replicas that acknowledged the last write of its own
	// connection: write a marker after the locks, then WAIT on the same
	// connection (a pipeline), and the stream's order does the rest.
	admin := harness.Client(t, oldMaster)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var acked *redis.Cmd
	if _, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "iso:sentinel:marker", "1", time.Minute)
		acked = p.Do(ctx, "wait", 1, 2000)
		return nil
	}); err != nil || acked.Val() != int64(1) {
		t.Fatalf("SET marker + WAIT 1 2000 on %s: %v, %v replicas acknowledged, want 1", oldMaster, err, acked.Val())
	}
	for _, h := range replicated {
		if r, err := testredis.Do(replica, "EXISTS", h.Key); err != nil || r != int64(1) {
			t.Fatalf("EXISTS %s on the replica %s = %v, %v, want 1 after WAIT", h.Key, replica, r, err)
		}
	}

	link.Blackhole(time.Minute)
	unrep := obtainRedislock(t, fc, "iso:sentinel:unreplicated", ttl, "master "+oldMaster+", NOT replicated")
	time.Sleep(200 * time.Millisecond)
	if r, err := testredis.Do(replica, "EXISTS", unrep.Key); err != nil || r != int64(0) {
		t.Fatalf("EXISTS %s on the replica %s = %v, %v, want 0: the cut replication link let it through", unrep.Key, replica, r, err)
	}

	// The spy reads the replica, the new master to be: once before the
	// failover, so that a renewal at any time after it shows as a PTTL
	// higher than before (the replica keeps the expiry times it was sent).
	all := append([]*harness.Held{unrep}, replicated...)
	mon := newMonitor(newServerSpy(t, replica), time.Now(), all)
	mon.sampleOnce()
	killed := time.Now()
	mon.since = killed
	if mode == "kill-master" {
		sn.Master.Kill(t)
	} else {
		sn.Failover(t)
	}
	newMaster := sn.WaitFailover(t, oldMaster, 20*time.Second)
	promoted := time.Now()
	t.Logf("%s on %s; the sentinel promoted %s %v later", mode, oldMaster, newMaster, promoted.Sub(killed).Round(time.Millisecond))
	if newMaster != replica {
		t.Fatalf("new master %s, want the replica %s", newMaster, replica)
	}
	for time.Since(killed) < ttl+3*time.Second {
		mon.sampleOnce()
		time.Sleep(sample)
	}

	for _, h := range replicated {
		r := mon.rec(h)
		evs := a.Lost.ForKey(h.Key)
		switch {
		case !r.goneAt.IsZero() || len(evs) > 0:
			t.Errorf("replicated lock lost after the failover, want it kept:%s", mon.describe([]*harness.Held{h}, a.Lost, 1))
		default:
			if at := mon.renewedAfter(h, killed); at.IsZero() || at.Sub(promoted) > renewAfterPromotion {
				when := "never"
				if !at.IsZero() {
					when = fmt.Sprintf("first at %s, %v after the promotion", mon.rel(at), at.Sub(promoted).Round(time.Millisecond))
				}
				t.Errorf("%v not renewed on the new master %s within %v of the promotion (at %s): %s; least PTTL %v", h, newMaster, renewAfterPromotion, mon.rel(promoted), when, r.least)
			}
		}
	}
	evs := a.Lost.ForKey(unrep.Key)
	switch {
	case len(evs) != 1:
		t.Errorf("the unreplicated lock %v reported %d times, want exactly once with ErrLockGone: %s; %s", unrep, len(evs), describeLost(a.Lost, unrep, killed), lostSummary(a.Lost))
	case !errors.Is(evs[0].Err, watchdog.ErrLockGone):
		t.Errorf("the unreplicated lock %v reported at %s with %q, want ErrLockGone (the new master answered that the key is gone); chain:%s", unrep, mon.rel(evs[0].At), evs[0].Err, testredis.ErrChain(evs[0].Err))
	}
	if r := mon.rec(unrep); r.goneAt.IsZero() || !r.backAt.IsZero() {
		t.Errorf("the unreplicated lock exists on the new master, want it never re-created:%s", mon.describe([]*harness.Held{unrep}, a.Lost, 1))
	}
	if !t.Failed() {
		var renewed []string
		for _, h := range replicated {
			renewed = append(renewed, fmt.Sprintf("%s %v", h.Key, mon.renewedAfter(h, killed).Sub(promoted).Round(time.Millisecond)))
		}
		t.Logf("replicated locks renewed on the new master after the promotion: %v; unreplicated lock reported once (%v at %s)", renewed, evs[0].Err, mon.rel(evs[0].At))
	}
}
