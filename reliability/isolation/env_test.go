package isolation_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// sample is how often the scenarios look at the keys.
const sample = 25 * time.Millisecond

// ---------------------------------------------------------------------------
// The application: a registry watching its clients, a watchdog attached.

// appConfig is what a test changes in the application.
type appConfig struct {
	onLostDelay time.Duration // how long OnLost takes, after it recorded the call
	opts        []watchdog.Option
}

// newApp is the start-up contract of the README (harness.App) over
// clients; a failed test shows the last 40 lines of the watchdog's log.
func newApp(t testing.TB, clients []redis.UniversalClient, c appConfig) *harness.App {
	t.Helper()
	cfg := harness.Config{Options: c.opts, LogTail: 40}
	if c.onLostDelay > 0 {
		cfg.OnLost = func(registry.Lock, error) { time.Sleep(c.onLostDelay) }
	}
	return harness.NewApp(t, clients, cfg)
}

// ---------------------------------------------------------------------------
// Locks, obtained through the upstream libraries as real users do.

// obtainRedislock obtains key with redislock through c, or fails t; node
// names where the key lives.
func obtainRedislock(t testing.TB, c redis.UniversalClient, key string, ttl time.Duration, node string) *harness.Held {
	t.Helper()
	return harness.MustObtainOn(t, harness.Redislock, []redis.UniversalClient{c}, key, ttl, node)
}

// obtainRedsync locks key for ttl with a redsync mutex over one pool per
// client (a majority of them must agree), or fails t.
func obtainRedsync(t testing.TB, clients []redis.UniversalClient, key string, ttl time.Duration, node string) *harness.Held {
	t.Helper()
	return harness.MustObtainOn(t, harness.Redsync, clients, key, ttl, node)
}

// ---------------------------------------------------------------------------
// Looking at the keys from outside: PTTL and GET through clients that are
// never watched.

// spy reads keys without going through any watched client.
type spy interface {
	states(keys []string) map[string]harness.KeyState
}

// serverSpy reads keys from one server.
type serverSpy struct{ c *redis.Client }

func newServerSpy(t testing.TB, addr string) *serverSpy {
	t.Helper()
	return &serverSpy{c: harness.NewSpy(t, addr)}
}

func (s *serverSpy) states(keys []string) map[string]harness.KeyState {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return harness.ReadKeys(ctx, s.c, keys, harness.Pipelined)
}

// clusterSpy reads keys of a Redis Cluster from the master that serves
// their slot as the live nodes see it now, following -ASK for a slot being
// migrated. It holds a plain client per node and never asks the
// application's cluster client anything.
type clusterSpy struct {
	t       testing.TB
	cluster *testredis.Cluster
	mu      sync.Mutex
	clients map[string]*redis.Client
}

func newClusterSpy(t testing.TB, c *testredis.Cluster) *clusterSpy {
	t.Helper()
	s := &clusterSpy{t: t, cluster: c, clients: map[string]*redis.Client{}}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.clients {
			_ = c.Close()
		}
	})
	return s
}

func (s *clusterSpy) client(addr string) *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[addr]
	if !ok {
		c = redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
		s.clients[addr] = c
	}
	return c
}

// owners maps each slot of keys to the live master serving it; keys whose
// master is down (not yet replaced) are left out.
func (s *clusterSpy) owners(keys []string) map[int]string {
	nodes := s.cluster.Nodes(s.t)
	out := map[int]string{}
	for _, k := range keys {
		slot := testredis.Slot(k)
		if _, ok := out[slot]; ok {
			continue
		}
		for _, n := range nodes {
			if !n.Master || n.Failed {
				continue
			}
			for _, r := range n.Slots {
				if slot >= r[0] && slot <= r[1] {
					if sv := s.cluster.Server(n.Addr); sv != nil && sv.Running() && !sv.Paused() {
						out[slot] = n.Addr
					}
				}
			}
		}
	}
	return out
}

func (s *clusterSpy) states(keys []string) map[string]harness.KeyState {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	owners := s.owners(keys)
	byNode := map[string][]string{}
	out := map[string]harness.KeyState{}
	for _, k := range keys {
		a, ok := owners[testredis.Slot(k)]
		if !ok {
			out[k] = harness.KeyState{Err: errors.New("no live master serves its slot")}
			continue
		}
		byNode[a] = append(byNode[a], k)
	}
	asks := map[string][]string{}
	for addr, ks := range byNode {
		for k, st := range harness.ReadKeys(ctx, s.client(addr), ks, harness.Pipelined) {
			if target, ok := askTarget(st.Err); ok {
				asks[target] = append(asks[target], k)
				continue
			}
			out[k] = st
		}
	}
	for addr, ks := range asks {
		for k, st := range harness.ReadKeys(ctx, s.client(addr), ks, harness.Asking) {
			out[k] = st
		}
	}
	return out
}

// askTarget returns the node an -ASK error redirects to.
func askTarget(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	f := strings.Fields(err.Error())
	if len(f) == 3 && f[0] == "ASK" {
		if _, _, e := net.SplitHostPort(f[2]); e == nil {
			return f[2], true
		}
	}
	return "", false
}

// ---------------------------------------------------------------------------
// Watching locks over time.

// keyRecord is what a monitor saw of one lock.
type keyRecord struct {
	h          *harness.Held
	least      time.Duration // least PTTL seen while it existed; -1 before any
	most       time.Duration // most PTTL seen
	samples    int
	goneAt     time.Time // first sample that found the key gone (or another value)
	goneBefore time.Duration
	other      string    // a value other than the holder's, if seen
	backAt     time.Time // first sample after goneAt that found the holder's value again
	backPTTL   time.Duration
	readErrs   int
	lastErr    error
	lastPTTL   time.Duration // PTTL at the last sample that found the holder's value; -1 before any
	lastAt     time.Time     // when that sample was read
	rises      []time.Time   // renewals seen: when each set the key's expiry (see renewedAt)
}

// monitor samples a set of locks and keeps, for each, the least PTTL seen
// and when it was first found gone.
type monitor struct {
	spy   spy
	since time.Time // what times in messages are relative to
	recs  map[string]*keyRecord
	order []*harness.Held
}

func newMonitor(s spy, since time.Time, hs ...[]*harness.Held) *monitor {
	m := &monitor{spy: s, since: since, recs: map[string]*keyRecord{}}
	for _, group := range hs {
		for _, h := range group {
			m.recs[h.Key+"\x00"+h.Node] = &keyRecord{h: h, least: -1, lastPTTL: -1}
			m.order = append(m.order, h)
		}
	}
	return m
}

func (m *monitor) keys() []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range m.order {
		if !seen[h.Key] {
			seen[h.Key] = true
			out = append(out, h.Key)
		}
	}
	return out
}

// sampleOnce reads every lock once.
func (m *monitor) sampleOnce() {
	st := m.spy.states(m.keys())
	now := time.Now()
	for _, h := range m.order {
		r := m.recs[h.Key+"\x00"+h.Node]
		s := st[h.Key]
		if s.Err != nil {
			r.readErrs++
			r.lastErr = s.Err
			continue
		}
		r.samples++
		if s.Exists && s.Value == h.Value && !r.goneAt.IsZero() && r.backAt.IsZero() {
			r.backAt, r.backPTTL = now, s.PTTL
		}
		if !s.Exists || s.Value != h.Value {
			if r.goneAt.IsZero() {
				r.goneAt = now
				r.goneBefore = r.least
				if s.Exists {
					r.other = s.Value
				}
			}
			continue
		}
		if r.least < 0 || s.PTTL < r.least {
			r.least = s.PTTL
		}
		// Between two samples a key's PTTL falls by their distance; it
		// rises only when something set a new expiry.
		if r.lastPTTL >= 0 && s.PTTL > r.lastPTTL+5*time.Millisecond {
			r.rises = append(r.rises, renewedAt(h.TTL, s.PTTL, r.lastAt, now))
		}
		r.lastPTTL, r.lastAt = s.PTTL, now
		r.most = max(r.most, s.PTTL)
	}
}

// renewedAt is when a renewal that set a key's expiry to ttl did so, at
// the latest, for a key read at now with pttl left whose sample before,
// read at prev, found it lower: Redis's own record of the renewal, not
// when a sample first saw it. A spy that cannot read a shard for a while
// (its cluster client reloads the slot map after a failover) sees the
// rise late; CI run 71 under load read a killed master's shard again
// 3.6 s after its replica's promotion and took that as the renewal's time,
// when the renewal may have come at any time in the gap. The read's own
// latency only makes the time later than the renewal, never earlier.
func renewedAt(ttl, pttl time.Duration, prev, now time.Time) time.Time {
	at := now
	if pttl <= ttl {
		at = now.Add(pttl - ttl)
	}
	if at.Before(prev) {
		return prev
	}
	return at
}

// run samples every sample for d.
func (m *monitor) run(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		m.sampleOnce()
		time.Sleep(sample)
	}
}

func (m *monitor) rec(h *harness.Held) *keyRecord { return m.recs[h.Key+"\x00"+h.Node] }

// lostOnServer returns the locks among hs found gone (or holding another
// value) at some sample.
func (m *monitor) lostOnServer(hs []*harness.Held) []*harness.Held {
	var out []*harness.Held
	for _, h := range hs {
		if !m.rec(h).goneAt.IsZero() {
			out = append(out, h)
		}
	}
	return out
}

// renewedAfter returns when the first renewal after t set h's expiry (a
// sample that found its PTTL higher than the sample before; see
// renewedAt), or the zero time.
func (m *monitor) renewedAfter(h *harness.Held, t time.Time) time.Time {
	for _, r := range m.rec(h).rises {
		if r.After(t) {
			return r
		}
	}
	return time.Time{}
}

// recreated returns the locks among hs whose key was found gone and later
// held again with the holder's value: re-created by someone who no longer
// held the lock.
func (m *monitor) recreated(hs []*harness.Held) []*harness.Held {
	var out []*harness.Held
	for _, h := range hs {
		if !m.rec(h).backAt.IsZero() {
			out = append(out, h)
		}
	}
	return out
}

// describe tells what happened to each of hs (at most max of them): where
// it lives, when it was found gone, the least PTTL seen before, and every
// OnLost report of it.
func (m *monitor) describe(hs []*harness.Held, lost *harness.LostLog, limit int) string {
	var b strings.Builder
	for i, h := range hs {
		if i == limit {
			fmt.Fprintf(&b, "\n  ... and %d more", len(hs)-limit)
			break
		}
		r := m.rec(h)
		fmt.Fprintf(&b, "\n  %v:", h)
		if r.goneAt.IsZero() {
			fmt.Fprintf(&b, " held at every sample (%d), least PTTL %v", r.samples, r.least)
		} else {
			fmt.Fprintf(&b, " gone on the server at %s (least PTTL before: %v)", m.rel(r.goneAt), r.goneBefore)
			if r.other != "" {
				fmt.Fprintf(&b, ", holding another value %q", r.other)
			}
		}
		if !r.backAt.IsZero() {
			fmt.Fprintf(&b, ", and BACK with the holder's value at %s (PTTL %v)", m.rel(r.backAt), r.backPTTL)
		}
		if r.readErrs > 0 {
			fmt.Fprintf(&b, ", %d unreadable samples (last: %v)", r.readErrs, r.lastErr)
		}
		fmt.Fprintf(&b, "; OnLost: %s", describeLost(lost, h, m.since))
	}
	return b.String()
}

func (m *monitor) rel(t time.Time) string {
	return fmt.Sprintf("%+.3fs", t.Sub(m.since).Seconds())
}

// leastOf summarises the least PTTL over hs.
func (m *monitor) leastOf(hs []*harness.Held) time.Duration {
	least := time.Duration(-1)
	for _, h := range hs {
		if l := m.rec(h).least; l >= 0 && (least < 0 || l < least) {
			least = l
		}
	}
	return least
}

// ---------------------------------------------------------------------------
// OnLost records.

// describeLost lists the reports of h (of its client's copy, when it has
// one).
func describeLost(lost *harness.LostLog, h *harness.Held, since time.Time) string {
	evs := lost.ForKey(h.Key)
	if h.Client != nil {
		evs = lost.ForLock(h.Client, h.Key)
	}
	if len(evs) == 0 {
		return "none"
	}
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("[%+.3fs %v]", ev.At.Sub(since).Seconds(), ev.Err))
	}
	return strings.Join(parts, " ")
}

// lossReasons are the reasons lostSummary counts reports by, the first
// matching one for each.
var lossReasons = []harness.Sentinel{
	{Name: "ErrLockGone", Err: watchdog.ErrLockGone},
	{Name: "ErrLockTaken", Err: watchdog.ErrLockTaken},
	{Name: "ErrUnreachable", Err: watchdog.ErrUnreachable},
	{Name: "ErrMaxHold", Err: watchdog.ErrMaxHold},
}

// lostSummary counts the reports by reason.
func lostSummary(lost *harness.LostLog) string {
	count := map[string]int{}
	for _, ev := range lost.All() {
		count[harness.FirstMatch(ev.Err, fmt.Sprintf("other(%v)", ev.Err), lossReasons...)]++
	}
	if len(count) == 0 {
		return "no OnLost report"
	}
	var parts []string
	for k, n := range count {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	return "OnLost reports: " + strings.Join(parts, ", ")
}

// reportedOf returns the locks of hs whose key OnLost reported (on any
// client).
func reportedOf(lost *harness.LostLog, hs []*harness.Held) []*harness.Held {
	var out []*harness.Held
	for _, h := range hs {
		if len(lost.ForKey(h.Key)) > 0 {
			out = append(out, h)
		}
	}
	return out
}

// waitReported waits until every key of hs has been reported on c (nil:
// any client), or within has passed; it returns the keys not reported.
func waitReported(lost *harness.LostLog, c redis.UniversalClient, hs []*harness.Held, within time.Duration) []*harness.Held {
	deadline := time.Now().Add(within)
	for {
		var missing []*harness.Held
		for _, h := range hs {
			evs := lost.ForKey(h.Key)
			if c != nil {
				evs = lost.ForLock(c, h.Key)
			}
			if len(evs) == 0 {
				missing = append(missing, h)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// silences pings servers from the kill on and records, for each, its
// longest silence: the longest time between two PINGs it answered. A
// failed cluster test logs it, to tell servers that stopped answering
// (the machine, the servers' own fsyncs at a failover) from a watchdog
// that stopped asking.
type silences struct {
	mu      sync.Mutex
	longest map[string][2]time.Time // from the answer before to the answer after
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// watchSilences starts pinging addrs every period until t's cleanup.
func watchSilences(t testing.TB, addrs []string, period time.Duration) *silences {
	ctx, cancel := context.WithCancel(context.Background())
	s := &silences{longest: map[string][2]time.Time{}, cancel: cancel}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 250 * time.Millisecond, ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			last := time.Now()
			for ctx.Err() == nil {
				if c.Ping(ctx).Err() == nil {
					now := time.Now()
					s.note(addr, last, now)
					last = now
				}
				select {
				case <-ctx.Done():
				case <-time.After(period):
				}
			}
			s.note(addr, last, time.Now()) // a silence still going on when the pinging stops
		}()
	}
	t.Cleanup(s.stop)
	return s
}

// note records that addr answered nothing from from to to, if that is
// its longest silence yet.
func (s *silences) note(addr string, from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.longest[addr]; to.Sub(from) > w[1].Sub(w[0]) {
		s.longest[addr] = [2]time.Time{from, to}
	}
}

// stop ends the pinging and waits for it.
func (s *silences) stop() {
	s.cancel()
	s.wg.Wait()
}

// describe lists each server's longest silence, times relative by rel.
func (s *silences) describe(rel func(time.Time) string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := make([]string, 0, len(s.longest))
	for a := range s.longest {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var b strings.Builder
	for _, a := range addrs {
		w := s.longest[a]
		fmt.Fprintf(&b, "\n  %s: %v without an answer to PING, from %s to %s", a, w[1].Sub(w[0]).Round(time.Millisecond), rel(w[0]), rel(w[1]))
	}
	return b.String()
}
