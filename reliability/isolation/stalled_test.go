package isolation_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// TestStalledServerDelaysNoOtherServer: one registry watches two Redis
// servers. Server A holds a 10 s lock and is SIGSTOPped for 4 s (it keeps
// its connections open and answers nothing); server B holds 50 one-second
// locks. No lock on B may expire or be reported lost while A is stopped,
// and A's lock must be renewed again once A continues (10 s is more than
// the stop). Under the default schedule the fast lane renews every lock.
//
// In "two-clients" the locks are redislock locks, one client per server.
// In "redsync-three-pools" they are redsync mutexes over a pool on each of
// three servers, A, B and C (the README's several-pools setup, Redlock):
// A's copies of the one-second mutexes may expire while A is stopped
// (nothing can reach A), but B and C hold a majority of every mutex, so
// their copies may not, and no mutex is lost. (With two pools a mutex
// needs both copies, a majority of two: A's stop loses every mutex whose
// copy on A expires, as redsync itself counts, and lockwatch reports it
// with ErrQuorumLost; the quorum tests in reliability/quorum cover that.)
func TestStalledServerDelaysNoOtherServer(t *testing.T) {
	harness.SkipShort(t, "holds locks through a 4 s SIGSTOP of a server")
	for _, mode := range []string{"two-clients", "redsync-three-pools"} {
		t.Run(mode, func(t *testing.T) {
			const (
				shortTTL = time.Second
				longTTL  = 10 * time.Second
				n        = 50
				stall    = 4 * time.Second
			)
			srvA, srvB, srvC := testredis.Start(t), testredis.Start(t), testredis.Start(t)
			nodeA, nodeB, nodeC := "server A "+srvA.Addr, "server B "+srvB.Addr, "server C "+srvC.Addr
			cA := redis.NewClient(&redis.Options{Addr: srvA.Addr})
			cB := redis.NewClient(&redis.Options{Addr: srvB.Addr})
			cC := redis.NewClient(&redis.Options{Addr: srvC.Addr})
			t.Cleanup(func() { _ = cA.Close(); _ = cB.Close(); _ = cC.Close() })
			t.Cleanup(func() { srvA.Resume(t) }) // before the clients close
			a := newApp(t, []redis.UniversalClient{cA, cB, cC}, appConfig{})
			all := []redis.UniversalClient{cA, cB, cC}

			var long, onA []*harness.Held // the long lock on A; A's copies of the short ones
			var healthy []*harness.Held   // locks on B that must be kept
			var healthyC []*harness.Held  // and their copies on C (three pools)
			switch mode {
			case "two-clients":
				long = append(long, obtainRedislock(t, cA, "iso:stall:long", longTTL, nodeA))
				for i := range n {
					healthy = append(healthy, obtainRedislock(t, cB, fmt.Sprintf("iso:stall:short:%d", i), shortTTL, nodeB))
				}
			case "redsync-three-pools":
				copies := func(m *harness.Held) {
					copyB, copyC := *m, *m
					copyB.Node, copyB.Client = nodeB, cB
					copyC.Node, copyC.Client = nodeC, cC
					healthy, healthyC = append(healthy, &copyB), append(healthyC, &copyC)
				}
				m := obtainRedsync(t, all, "iso:stall:long", longTTL, nodeA)
				long = append(long, m)
				copies(m)
				for i := range n {
					m := obtainRedsync(t, all, fmt.Sprintf("iso:stall:short:%d", i), shortTTL, nodeA)
					onA = append(onA, m)
					copies(m)
				}
			}
			t.Cleanup(func() { harness.ReleaseQuietly(append(long, healthy...)...) })

			spyA, spyB, spyC := newServerSpy(t, srvA.Addr), newServerSpy(t, srvB.Addr), newServerSpy(t, srvC.Addr)
			time.Sleep(300 * time.Millisecond) // a few renewals in steady state
			// A's lock is read once before the stop and not while A is
			// stopped: a renewal after A continues shows as a PTTL higher
			// than before the stop, even one that A runs the moment it
			// continues (a pipeline written while it was stopped).
			mA := newMonitor(spyA, time.Now(), long)
			mA.sampleOnce()
			stopped := time.Now()
			mA.since = stopped
			srvA.Pause(t)
			mB := newMonitor(spyB, stopped, healthy)
			mC := newMonitor(spyC, stopped, healthyC)
			cDone := make(chan struct{})
			go func() {
				defer close(cDone)
				mC.run(stall)
			}()
			mB.run(stall)
			<-cDone
			srvA.Resume(t)
			resumed := time.Now()
			t.Logf("server A %s SIGSTOPped for %v", srvA.Addr, resumed.Sub(stopped).Round(time.Millisecond))

			// After A continues: its long lock must be renewed to its full
			// TTL again, and B's locks must still be held.
			for time.Since(resumed) < 3*time.Second {
				mA.sampleOnce()
				mB.sampleOnce()
				mC.sampleOnce()
				time.Sleep(sample)
			}
			renewedAt := mA.renewedAfter(long[0], resumed)

			var failed bool
			if lostB := mB.lostOnServer(healthy); len(lostB) > 0 {
				failed = true
				t.Errorf("%d of %d healthy %v locks on %s expired while %s was SIGSTOPped, want none (least PTTL over all: %v)%s; %s:%s",
					len(lostB), len(healthy), shortTTL, nodeB, nodeA, mB.leastOf(healthy), a.Lag.Note(stall), lostSummary(a.Lost), mB.describe(lostB, a.Lost, 10))
			}
			if lostC := mC.lostOnServer(healthyC); len(lostC) > 0 {
				failed = true
				t.Errorf("%d of %d healthy copies on %s expired while %s was SIGSTOPped, want none (least PTTL over all: %v); %s:%s",
					len(lostC), len(healthyC), nodeC, nodeA, mC.leastOf(healthyC), lostSummary(a.Lost), mC.describe(lostC, a.Lost, 10))
			}
			var reportedB []*harness.Held
			for _, h := range healthy {
				if len(a.Lost.ForLock(cB, h.Key)) > 0 || (mode != "two-clients" && len(a.Lost.ForLock(cA, h.Key)) > 0) {
					reportedB = append(reportedB, h)
				}
			}
			if len(reportedB) > 0 {
				failed = true
				t.Errorf("%d of %d healthy locks on %s reported to OnLost, want none:%s", len(reportedB), len(healthy), nodeB, mB.describe(reportedB, a.Lost, 10))
			}
			if lostA := mA.lostOnServer(long); len(lostA) > 0 || len(a.Lost.ForLock(cA, long[0].Key)) > 0 {
				failed = true
				t.Errorf("the %v lock on %s, SIGSTOPped for %v only, was lost, want it kept:%s", longTTL, nodeA, stall, mA.describe(long, a.Lost, 1))
			} else if renewedAt.IsZero() {
				failed = true
				t.Errorf("the %v lock on %s was not renewed within 3s after the server continued (PTTL seen: least %v, most %v), want it renewed", longTTL, nodeA, mA.rec(long[0]).least, mA.rec(long[0]).most)
			}
			for _, h := range onA {
				// B and C hold a majority of each mutex: losing A's copy is
				// no loss of the mutex.
				if evs := a.Lost.ForLock(cA, h.Key); len(evs) > 0 {
					failed = true
					t.Errorf("the mutex %v was reported lost %d times though B and C held a majority of it: %s", h, len(evs), describeLost(a.Lost, h, stopped))
				}
			}
			if !failed {
				t.Logf("all %d locks on B kept while A was stopped (least PTTL %v); A's %v lock renewed %v after A continued; %s",
					len(healthy), mB.leastOf(healthy), longTTL, renewedAt.Sub(resumed).Round(time.Millisecond), lostSummary(a.Lost))
			}
		})
	}
}
