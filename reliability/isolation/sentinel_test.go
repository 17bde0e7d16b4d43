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
//
// Unless the promotion comes too late for any client: each lock expires at
// a time the test reads before the kill (on the replica for the replicated
// ones, whose link is cut; on the master for the other), and go-redis can
// take a second after the promotion to reach the new master (after as many
// failed dials as its pool holds, the pool answers with the last dial
// error, and dials again once a second). A lock whose expiry comes less
// than reachAfterPromotion after the promotion cannot be kept, nor the
// unreplicated one be found gone on the new master before its holder's
// deadline: for those the test asks only that each is reported once, with
// a cause that matches ErrLost, and that nothing is re-created (under
// load in CI run 58 the sentinel took 4.6 s to promote, 240 ms before the
// replicated locks' expiry).
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
		reachAfterPromotion = 1500 * time.Millisecond
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
	// When each lock expires where it will be looked for after the
	// failover: the replicated ones on the replica (its link is cut, so
	// their expiry there no longer moves), the unreplicated one on the
	// master, as its holder last renewed it. Each is read as a PTTL after
	// the time taken before the read: a time no later than the expiry.
	expires := map[*harness.Held]time.Time{}
	read := time.Now()
	mon.sampleOnce()
	for _, h := range replicated {
		if r := mon.rec(h); r.lastPTTL >= 0 && r.goneAt.IsZero() {
			expires[h] = read.Add(r.lastPTTL)
		}
	}
	read = time.Now()
	if ms, err := testredis.Do(oldMaster, "PTTL", unrep.Key); err == nil {
		if n, ok := ms.(int64); ok && n >= 0 {
			expires[unrep] = read.Add(time.Duration(n) * time.Millisecond)
		}
	}
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

	// tooLate reports whether h expired less than reachAfterPromotion after
	// the promotion (or its expiry could not be read before the kill).
	tooLate := func(h *harness.Held) bool {
		e, ok := expires[h]
		if !ok || e.Sub(promoted) < reachAfterPromotion {
			when := "could not be read before the kill"
			if ok {
				when = fmt.Sprintf("%v after the promotion", e.Sub(promoted).Round(time.Millisecond))
			}
			t.Logf("NOT JUDGED whether %v was kept and what it was reported with: its expiry %s, want at least %v (go-redis may take a second to reach the new master); only that it is reported once with a cause matching ErrLost", h, when, reachAfterPromotion)
			return true
		}
		return false
	}
	// reportedOnceAsLost checks what is still asked of a lock the
	// promotion came too late for.
	reportedOnceAsLost := func(h *harness.Held) {
		r, evs := mon.rec(h), a.Lost.ForKey(h.Key)
		switch {
		case r.goneAt.IsZero() && len(evs) == 0:
			// Kept after all.
		case len(evs) != 1:
			t.Errorf("%v reported %d times, want exactly once: %s; %s", h, len(evs), describeLost(a.Lost, h, killed), lostSummary(a.Lost))
		case !errors.Is(evs[0].Err, watchdog.ErrLost):
			t.Errorf("%v reported at %s with %q, want a cause matching ErrLost; chain:%s", h, mon.rel(evs[0].At), evs[0].Err, testredis.ErrChain(evs[0].Err))
		}
	}
	for _, h := range replicated {
		r := mon.rec(h)
		evs := a.Lost.ForKey(h.Key)
		if tooLate(h) {
			reportedOnceAsLost(h)
			continue
		}
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
	case tooLate(unrep):
		reportedOnceAsLost(unrep)
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
