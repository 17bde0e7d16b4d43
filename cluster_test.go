package lockwatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// On a real cluster, locks spread over all three masters are renewed in
// slot-grouped calls: a multi-key call spanning slots would fail with
// CROSSSLOT, so no failure and one renewal per lock per sweep is the proof.
func TestClusterRenewsAcrossSlots(t *testing.T) {
	addrs := testredis.StartCluster(t, testredis.ClusterOptions{Masters: 3}).Addrs()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	observer := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close(); _ = observer.Close() })
	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(cc); err != nil {
		t.Fatal(err)
	}
	var lost []string
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 1h"), watchdog.WithChunkSize(4),
		watchdog.WithOnLost(func(l registry.Lock, err error) { lost = append(lost, fmt.Sprint(l.Key, ": ", err)) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wd.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 60
	locker := redislock.New(cc)
	var locks []*redislock.Lock
	for i := range n {
		key := fmt.Sprintf("cluster:job:%d", i)
		if i%3 == 0 {
			key = fmt.Sprintf("cluster:{tagged}:%d", i) // several keys in one slot
		}
		l, err := locker.Obtain(ctx, key, time.Minute, nil)
		if err != nil {
			t.Fatalf("Obtain(%s): %v", key, err)
		}
		locks = append(locks, l)
	}
	mutex := redsync.New(goredis.NewPool(cc)).NewMutex("cluster:mutex", redsync.WithExpiry(time.Minute))
	if err := mutex.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	masters := map[string]bool{}
	for _, l := range locks {
		c, err := cc.MasterForKey(ctx, l.Key())
		if err != nil {
			t.Fatal(err)
		}
		masters[c.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("locks live on %d masters, want all 3", len(masters))
	}
	if got := reg.Len(); got != n+1 {
		t.Fatalf("tracked %d locks, want %d", got, n+1)
	}
	for round := 1; round <= 2; round++ {
		if err := wd.Sweep(ctx); err != nil {
			t.Fatalf("Sweep %d: %v", round, err)
		}
	}
	if s := wd.Stats(); s.Failures != 0 || s.Renewals != 2*(n+1) || s.Lost != 0 {
		t.Errorf("Stats() after 2 sweeps = %+v, want %d renewals, no failure, no loss (%v)", s, 2*(n+1), lost)
	}
	for _, l := range reg.Locks() {
		if l.Renewals != 2 {
			t.Errorf("lock %s renewals = %d, want 2", l.Key, l.Renewals)
		}
	}
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%s): %v", l.Key(), err)
		}
	}
	if ok, err := mutex.UnlockContext(ctx); !ok || err != nil {
		t.Errorf("Unlock = %v, %v, want true, nil", ok, err)
	}
	if got := reg.Len(); got != 0 {
		t.Errorf("tracked %d locks after release, want 0", got)
	}
	if err := wd.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range locks {
		if n := observer.Exists(ctx, l.Key()).Val(); n != 0 {
			t.Errorf("EXISTS %s = %d after release and a sweep, want 0", l.Key(), n)
		}
	}
}

// A Ring routes a command by its first key: the watchdog renews one key per
// call there, so keys on every shard are renewed and none is wrongly lost.
func TestRingRenewsEveryShard(t *testing.T) {
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(ring); err != nil {
		t.Fatal(err)
	}
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 1h"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wd.Stop)
	ctx := context.Background()
	const n = 40
	for i := range n {
		if _, err := redislock.Obtain(ctx, ring, fmt.Sprintf("ring:%d", i), time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("keys per shard = %d, %d, want both shards used", len(m1.Keys()), len(m2.Keys()))
	}
	if err := wd.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if s := wd.Stats(); s.Renewals != n || s.Lost != 0 || s.Failures != 0 {
		t.Errorf("Stats() after a sweep = %+v, want %d renewals, no loss, no failure", s, n)
	}
}

// A master that stops answering delays no renewal on the other masters: each
// node has its own lane of pipelines. The stopped node's locks are retried
// by the fast lane and renewed once it answers again.
func TestClusterDeadNodeDelaysNoOtherNode(t *testing.T) {
	harness.SkipShort(t, "starts a cluster and waits out a dead node for seconds (reliability/isolation has the long version)")
	cl := testredis.StartCluster(t, testredis.ClusterOptions{Masters: 3})
	addrs := cl.Addrs()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(cc); err != nil {
		t.Fatal(err)
	}
	var lost []string
	// The stopped node's calls time out after a second: the live nodes'
	// 400 or so renewals go out in calls of 4 keys, two calls in flight per node,
	// one round trip after another, so that how soon they are all sent
	// depends on how fast this process runs. Beside two burners and the
	// rest of CI under -race the last went out at 304-337 ms (CI run 97, a
	// loop of the package beside CI run 101); a node waiting for the
	// stopped one would send nothing before the second.
	const timeout = time.Second
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 1h"), watchdog.WithChunkSize(4),
		watchdog.WithTimeout(timeout),
		watchdog.WithOnLost(func(l registry.Lock, err error) { lost = append(lost, fmt.Sprint(l.Key, ": ", err)) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wd.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const n = 600
	locker := redislock.New(cc)
	nodeOf := map[string]string{}
	for i := range n {
		key := fmt.Sprintf("dead:%d", i)
		if _, err := locker.Obtain(ctx, key, time.Minute, nil); err != nil {
			t.Fatalf("Obtain(%s): %v", key, err)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		nodeOf[key] = m.Options().Addr
	}
	dead := addrs[1]
	lag := lagmeter.Start(t)
	cl.Server(dead).Pause(t)
	defer cl.Server(dead).Resume(t) // before the cleanup stops the watchdog
	start := time.Now()
	if err := wd.Sweep(ctx); err == nil {
		t.Errorf("Sweep with a stopped master = nil, want the stopped node's error")
	}
	took := time.Since(start)
	var healthy, onDead int
	var latest time.Duration
	for _, l := range reg.Locks() {
		if nodeOf[l.Key] == dead {
			onDead++
			if !l.ConfirmedAt.Before(start) {
				t.Errorf("%s on the stopped node was confirmed during the sweep", l.Key)
			}
			continue
		}
		healthy++
		if l.ConfirmedAt.Before(start) {
			t.Errorf("%s on a live node was not renewed by the sweep", l.Key)
			continue
		}
		latest = max(latest, l.ConfirmedAt.Sub(start))
	}
	// Every live node's renewal went out before the first attempt on the
	// stopped node could even have timed out, give or take how late this
	// process ran meanwhile.
	if limit := lag.Bound(timeout, start); latest >= limit {
		t.Errorf("the last renewal on a live node was sent %v after the sweep began, want < %v (the stopped node's timeout %v, this process late by up to %v)", latest, limit, timeout, lag.Since(start))
	}
	if healthy == 0 || onDead == 0 {
		t.Fatalf("locks on live nodes %d, on the stopped node %d, want both", healthy, onDead)
	}
	t.Logf("sweep with a stopped master took %v; %d locks on live nodes all sent within %v; %d on the stopped node failed", took, healthy, latest, onDead)

	cl.Server(dead).Resume(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		pending := 0
		for _, l := range reg.Locks() {
			if !l.ConfirmedAt.After(start) {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d locks of the stopped node not renewed 20s after it answers again", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(lost) != 0 || reg.Len() != n {
		t.Errorf("lost %v, tracked %d, want nothing lost and %d tracked", lost, reg.Len(), n)
	}
}
