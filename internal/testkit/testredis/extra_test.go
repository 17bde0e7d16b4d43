package testredis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPauseResume: a paused server accepts connections but answers
// nothing; resumed, it answers again; a paused server is still stopped at
// cleanup without waiting for the SIGTERM timeout.
func TestPauseResume(t *testing.T) {
	s := Start(t)
	s.Pause(t)
	if !s.Paused() {
		t.Errorf("Paused() after Pause = false, want true")
	}
	start := time.Now()
	if _, err := DoTimeoutAt(s.Addr, 300*time.Millisecond, "PING"); err == nil {
		t.Errorf("PING to a paused server answered, want a timeout")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("PING to a paused server failed after %v, want it to hang until the 300ms deadline", d)
	}
	s.Resume(t)
	if s.Paused() {
		t.Errorf("Paused() after Resume = true, want false")
	}
	if err := Ping(s.Addr); err != nil {
		t.Errorf("PING after Resume = %v, want nil", err)
	}
	s.Pause(t) // left paused: the cleanup must cope
}

// TestDo covers the reply types of Do.
func TestDo(t *testing.T) {
	s := Start(t)
	for _, c := range []struct {
		args []string
		want any
	}{
		{[]string{"SET", "k", "v w"}, "OK"},
		{[]string{"GET", "k"}, "v w"},
		{[]string{"GET", "missing"}, nil},
		{[]string{"INCR", "n"}, int64(1)},
		{[]string{"RPUSH", "l", "a", "b"}, int64(2)},
	} {
		got, err := Do(s.Addr, c.args...)
		if err != nil || got != c.want {
			t.Errorf("Do(%q) = %#v, %v, want %#v, nil", c.args, got, err, c.want)
		}
	}
	got, err := Do(s.Addr, "LRANGE", "l", "0", "-1")
	if l, ok := got.([]any); err != nil || !ok || len(l) != 2 || l[0] != "a" || l[1] != "b" {
		t.Errorf("Do(LRANGE) = %#v, %v, want [a b]", got, err)
	}
	_, err = Do(s.Addr, "INCR", "k")
	var re ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "ERR") {
		t.Errorf("Do(INCR of a string) error = %v, want an ERR reply", err)
	}
	if role, err := InfoField(s.Addr, "replication", "role"); err != nil || role != "master" {
		t.Errorf("InfoField(role) = %q, %v, want master", role, err)
	}
}

// TestStartWithArgsAndConfig: extra arguments and a config file reach the
// server.
func TestStartWithArgsAndConfig(t *testing.T) {
	s := StartWith(t, Options{Config: "maxmemory-policy allkeys-lru\n", Args: []string{"--hz", "50"}})
	for _, c := range []struct{ cmd, want string }{
		{"CONFIG GET hz", "hz 50"},
		{"CONFIG GET maxmemory-policy", "maxmemory-policy allkeys-lru"},
	} {
		if got := do(t, s.Addr, c.cmd); got != c.want {
			t.Errorf("%s = %q, want %q", c.cmd, got, c.want)
		}
	}
}

// TestSlot checks Slot against the server's CLUSTER KEYSLOT (which works
// without cluster mode) and the hash tag rules.
func TestSlot(t *testing.T) {
	s := StartWith(t, Options{Args: []string{"--cluster-enabled", "yes"}})
	for _, k := range []string{"", "a", "job:42", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "123456789"} {
		r, err := Do(s.Addr, "CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		if got := Slot(k); int64(got) != r.(int64) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, r)
		}
	}
}

// TestClusterFailoverAndMigration starts 3 masters with a replica each,
// kills a master and waits for its replica's promotion, then leaves a slot
// half-migrated and checks the server's answers.
func TestClusterFailoverAndMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster and waits for a failover (several seconds); skipped with -short")
	}
	c := StartCluster(t, ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: time.Second, NoFullCoverage: true})
	if n := len(c.Servers); n != 6 {
		t.Fatalf("%d servers, want 6", n)
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("masters %v, want 3", masters)
	}
	victim := c.MasterOf(t, 0)
	reps := c.ReplicasOf(t, victim)
	if len(reps) != 1 {
		t.Fatalf("replicas of %s: %v, want 1", victim, reps)
	}
	if r, err := Do(victim, "SET", "{a}k", "v"); err != nil || r != "OK" {
		// slot of "a" is 15495: not the victim's; expect MOVED.
		var re ReplyError
		if !errors.As(err, &re) || !strings.HasPrefix(string(re), "MOVED") {
			t.Errorf("SET {a}k on %s = %v, %v, want OK or MOVED", victim, r, err)
		}
	}
	killed := time.Now()
	c.Kill(t, victim)
	promoted := c.WaitPromoted(t, 0, victim, 30*time.Second)
	t.Logf("master %s killed; replica %s serves slot 0 %v later (node timeout 1s)", victim, promoted, time.Since(killed).Round(time.Millisecond))
	if promoted != reps[0] {
		t.Errorf("slot 0 served by %s after the failover, want the replica %s", promoted, reps[0])
	}
	// Events: what the nodes logged of it, the promoted replica's election
	// among it.
	var won, marked bool
	for _, e := range c.Events() {
		won = won || (strings.HasPrefix(e, promoted+": ") && strings.Contains(e, "election won"))
		marked = marked || strings.Contains(e, "as failing")
	}
	if !won || !marked {
		t.Errorf("Events after the failover: an election won by %s %v, a node marked failing %v, want both; events:\n%s", promoted, won, marked, strings.Join(c.Events(), "\n"))
	}

	// Half-migrate a slot between two live masters.
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("{mig}:%d", i)
	}
	slot := Slot(keys[0])
	from := c.MasterOf(t, slot)
	var to string
	for _, m := range c.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	for _, k := range keys {
		if r, err := Do(from, "SET", k, "v", "PX", "60000"); err != nil || r != "OK" {
			t.Fatalf("SET %s on %s = %v, %v", k, from, r, err)
		}
	}
	if got := c.HalfMigrate(t, slot, to, keys[:3]); got != from {
		t.Errorf("HalfMigrate returned source %s, want %s", got, from)
	}
	_, err := Do(from, "MGET", keys[0], keys[4])
	if !isReply(err, "TRYAGAIN") {
		t.Errorf("MGET of a moved and a kept key on the source: error %v, want TRYAGAIN", err)
	}
	_, err = Do(from, "GET", keys[0])
	if !isReply(err, "ASK") {
		t.Errorf("GET of a moved key on the source: error %v, want ASK", err)
	}
	if r, err := Do(from, "PTTL", keys[4]); err != nil || r.(int64) <= 0 {
		t.Errorf("PTTL of a kept key on the source = %v, %v, want a positive TTL", r, err)
	}
	// On the target, a moved key is there with its TTL (MIGRATE keeps it);
	// reading it needs ASKING on the same connection, so count keys instead.
	if r, err := Do(to, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); err != nil || r != int64(3) {
		t.Errorf("CLUSTER COUNTKEYSINSLOT %d on the target = %v, %v, want 3", slot, r, err)
	}
}

func isReply(err error, prefix string) bool {
	var re ReplyError
	return errors.As(err, &re) && strings.HasPrefix(string(re), prefix+" ")
}

// TestSentinelFailover starts a master, a replica and three sentinels,
// kills the master and waits for the sentinels to promote the replica.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a sentinel failover (a few seconds); skipped with -short")
	}
	s := StartSentinel(t, SentinelOptions{Sentinels: 3})
	if got := s.MasterAddr(t); got != s.Master.Addr {
		t.Fatalf("sentinels name master %s, want %s", got, s.Master.Addr)
	}
	if r, err := Do(s.Master.Addr, "SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET = %v, %v", r, err)
	}
	if r, err := Do(s.Master.Addr, "WAIT", "1", "2000"); err != nil || r != int64(1) {
		t.Fatalf("WAIT 1 = %v, %v, want 1 replica", r, err)
	}
	killed := time.Now()
	s.Master.Kill(t)
	addr := s.WaitFailover(t, s.Master.Addr, 20*time.Second)
	t.Logf("master killed; sentinels promoted %s %v later", addr, time.Since(killed).Round(time.Millisecond))
	if addr != s.Replica.Addr {
		t.Errorf("new master %s, want the replica %s", addr, s.Replica.Addr)
	}
	if r, err := Do(addr, "GET", "k"); err != nil || r != "v" {
		t.Errorf("GET k on the new master = %v, %v, want v", r, err)
	}
	if t.Failed() {
		t.Logf("%s", s.Output())
	}
}

// TestSentinelManualFailover: SENTINEL FAILOVER swaps the roles without a
// failure.
func TestSentinelManualFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a sentinel failover (a few seconds); skipped with -short")
	}
	begin := time.Now()
	s := StartSentinel(t, SentinelOptions{})
	t.Logf("master, replica and a sentinel ready in %v", time.Since(begin).Round(time.Millisecond))
	start := time.Now()
	s.Failover(t)
	addr := s.WaitFailover(t, s.Master.Addr, 20*time.Second)
	t.Logf("SENTINEL FAILOVER: %s is master %v later", addr, time.Since(start).Round(time.Millisecond))
	if addr != s.Replica.Addr {
		t.Errorf("new master %s, want the replica %s", addr, s.Replica.Addr)
	}
}
