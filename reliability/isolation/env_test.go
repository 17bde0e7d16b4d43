package isolation_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// sample is how often the scenarios look at the keys.
const sample = 25 * time.Millisecond

// ---------------------------------------------------------------------------
// The application: a registry watching its clients, a watchdog attached.

// app is the start-up contract of the README: one registry with both
// adapters watching every client the application locks with, and one
// watchdog attached with an OnLost that records, a logger whose output is
// shown when the test fails, and the test's options.
type app struct {
	t    testing.TB
	reg  *registry.Registry
	wd   *watchdog.Watchdog
	lost *lostLog
	logs *lockedBuffer
	lag  *lagmeter.Meter
}

// onLostFunc lets a test slow OnLost down; it runs before the record.
type appConfig struct {
	onLostDelay time.Duration // how long OnLost takes
	opts        []watchdog.Option
}

func newApp(t testing.TB, clients []redis.UniversalClient, c appConfig) *app {
	t.Helper()
	a := &app{t: t, lost: &lostLog{}, logs: &lockedBuffer{}, lag: lagmeter.Start(t)}
	a.reg = registry.New(bsmredislock.New(), goredsync.New())
	for _, c := range clients {
		if err := a.reg.Watch(c); err != nil {
			t.Fatalf("reg.Watch(%T): got %v, want nil", c, err)
		}
	}
	logger := slog.New(slog.NewTextHandler(a.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	onLost := func(l registry.Lock, err error) {
		a.lost.add(l, err)
		if c.onLostDelay > 0 {
			time.Sleep(c.onLostDelay)
		}
	}
	opts := append([]watchdog.Option{watchdog.WithOnLost(onLost), watchdog.WithLogger(logger)}, c.opts...)
	wd, err := watchdog.Attach(a.reg, opts...)
	if err != nil {
		t.Fatalf("watchdog.Attach: got %v, want nil", err)
	}
	a.wd = wd
	t.Cleanup(func() {
		start := time.Now()
		wd.Stop()
		if d := time.Since(start); d > time.Second {
			t.Logf("cleanup: watchdog.Stop took %v", d.Round(time.Millisecond))
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watchdog log (Info and above), last lines:\n%s", a.logs.tail(40))
		}
	})
	return a
}

// ---------------------------------------------------------------------------
// Locks, obtained through the upstream libraries as real users do.

// held is one lock as its holder sees it. node names where its key lives
// (a server's role and address), for messages.
type held struct {
	lib     string
	key     string
	value   string
	ttl     time.Duration
	node    string
	client  redis.UniversalClient // the watched client the copy was obtained through
	release func(context.Context) error
	rl      *redislock.Lock // nil for redsync
}

func (h *held) String() string {
	if h.node == "" {
		return fmt.Sprintf("%s %s (TTL %v)", h.lib, h.key, h.ttl)
	}
	return fmt.Sprintf("%s %s (TTL %v, on %s)", h.lib, h.key, h.ttl, h.node)
}

func obtainRedislock(t testing.TB, c redis.UniversalClient, key string, ttl time.Duration, node string) *held {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := redislock.New(c).Obtain(ctx, key, ttl, nil)
	if err != nil {
		t.Fatalf("redislock Obtain(%q, %v) on %s: got %v, want nil", key, ttl, node, err)
	}
	return &held{lib: "redislock", key: key, value: l.Token() + l.Metadata(), ttl: ttl, node: node, client: c, release: l.Release, rl: l}
}

// obtainRedsync locks key for ttl with a redsync mutex over one pool per
// client (a majority of them must agree).
func obtainRedsync(t testing.TB, clients []redis.UniversalClient, key string, ttl time.Duration, node string) *held {
	t.Helper()
	var pools []redsyncredis.Pool
	for _, c := range clients {
		pools = append(pools, goredis.NewPool(c))
	}
	// redsync gives an attempt 5 % of the expiry by default, too little
	// for a dial under -race (see the README's limits).
	m := redsync.New(pools...).NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1), redsync.WithTimeoutFactor(0.5))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.LockContext(ctx); err != nil {
		t.Fatalf("redsync Lock(%q, %v) on %s: got %v, want nil", key, ttl, node, err)
	}
	release := func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock answered false")
		}
		return err
	}
	return &held{lib: "redsync", key: key, value: m.Value(), ttl: ttl, node: node, client: clients[0], release: release}
}

// releaseQuietly releases every lock at the end of a test; a lock the test
// has already failed over is not reported again.
func releaseQuietly(hs []*held) {
	for _, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = h.release(ctx)
		cancel()
	}
}

// ---------------------------------------------------------------------------
// Looking at the keys from outside: PTTL and GET through clients that are
// never watched.

// keyState is what a server holds under a key.
type keyState struct {
	exists bool
	value  string
	pttl   time.Duration
	err    error // the server could not be asked
}

// spy reads keys without going through any watched client.
type spy interface {
	states(keys []string) map[string]keyState
}

// serverSpy reads keys from one server.
type serverSpy struct{ c *redis.Client }

func newServerSpy(t testing.TB, addr string) *serverSpy {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return &serverSpy{c: c}
}

func (s *serverSpy) states(keys []string) map[string]keyState {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return readStates(ctx, s.c, keys, false)
}

// readStates reads GET and PTTL of keys in one pipeline on c; with asking,
// each command is preceded by ASKING (for keys of a slot being imported).
func readStates(ctx context.Context, c *redis.Client, keys []string, asking bool) map[string]keyState {
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	// Each command's own error is looked at below; Pipelined's is the
	// first of them.
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			if asking {
				p.Do(ctx, "asking")
			}
			gets[i] = p.Get(ctx, k)
			if asking {
				p.Do(ctx, "asking")
			}
			pttls[i] = p.PTTL(ctx, k)
		}
		return nil
	})
	out := make(map[string]keyState, len(keys))
	for i, k := range keys {
		v, gerr := gets[i].Result()
		switch {
		case errors.Is(gerr, redis.Nil):
			out[k] = keyState{}
		case gerr != nil:
			out[k] = keyState{err: gerr}
		default:
			out[k] = keyState{exists: true, value: v, pttl: pttls[i].Val(), err: pttls[i].Err()}
		}
	}
	return out
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

func (s *clusterSpy) states(keys []string) map[string]keyState {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	owners := s.owners(keys)
	byNode := map[string][]string{}
	out := map[string]keyState{}
	for _, k := range keys {
		a, ok := owners[testredis.Slot(k)]
		if !ok {
			out[k] = keyState{err: errors.New("no live master serves its slot")}
			continue
		}
		byNode[a] = append(byNode[a], k)
	}
	asks := map[string][]string{}
	for addr, ks := range byNode {
		for k, st := range readStates(ctx, s.client(addr), ks, false) {
			if target, ok := askTarget(st.err); ok {
				asks[target] = append(asks[target], k)
				continue
			}
			out[k] = st
		}
	}
	for addr, ks := range asks {
		for k, st := range readStates(ctx, s.client(addr), ks, true) {
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
	h          *held
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
	rises      []time.Time   // samples whose PTTL was higher than the last one's: a renewal in between
}

// monitor samples a set of locks and keeps, for each, the least PTTL seen
// and when it was first found gone.
type monitor struct {
	spy   spy
	since time.Time // what times in messages are relative to
	recs  map[string]*keyRecord
	order []*held
}

func newMonitor(s spy, since time.Time, hs ...[]*held) *monitor {
	m := &monitor{spy: s, since: since, recs: map[string]*keyRecord{}}
	for _, group := range hs {
		for _, h := range group {
			m.recs[h.key+"\x00"+h.node] = &keyRecord{h: h, least: -1, lastPTTL: -1}
			m.order = append(m.order, h)
		}
	}
	return m
}

func (m *monitor) keys() []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range m.order {
		if !seen[h.key] {
			seen[h.key] = true
			out = append(out, h.key)
		}
	}
	return out
}

// sampleOnce reads every lock once.
func (m *monitor) sampleOnce() {
	st := m.spy.states(m.keys())
	now := time.Now()
	for _, h := range m.order {
		r := m.recs[h.key+"\x00"+h.node]
		s := st[h.key]
		if s.err != nil {
			r.readErrs++
			r.lastErr = s.err
			continue
		}
		r.samples++
		if s.exists && s.value == h.value && !r.goneAt.IsZero() && r.backAt.IsZero() {
			r.backAt, r.backPTTL = now, s.pttl
		}
		if !s.exists || s.value != h.value {
			if r.goneAt.IsZero() {
				r.goneAt = now
				r.goneBefore = r.least
				if s.exists {
					r.other = s.value
				}
			}
			continue
		}
		if r.least < 0 || s.pttl < r.least {
			r.least = s.pttl
		}
		// Between two samples a key's PTTL falls by their distance; it
		// rises only when something set a new expiry.
		if r.lastPTTL >= 0 && s.pttl > r.lastPTTL+5*time.Millisecond {
			r.rises = append(r.rises, now)
		}
		r.lastPTTL = s.pttl
		r.most = max(r.most, s.pttl)
	}
}

// run samples every sample for d.
func (m *monitor) run(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		m.sampleOnce()
		time.Sleep(sample)
	}
}

func (m *monitor) rec(h *held) *keyRecord { return m.recs[h.key+"\x00"+h.node] }

// lostOnServer returns the locks among hs found gone (or holding another
// value) at some sample.
func (m *monitor) lostOnServer(hs []*held) []*held {
	var out []*held
	for _, h := range hs {
		if !m.rec(h).goneAt.IsZero() {
			out = append(out, h)
		}
	}
	return out
}

// renewedAfter returns the first sample after t that showed h's PTTL
// higher than the sample before (a renewal), or the zero time.
func (m *monitor) renewedAfter(h *held, t time.Time) time.Time {
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
func (m *monitor) recreated(hs []*held) []*held {
	var out []*held
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
func (m *monitor) describe(hs []*held, lost *lostLog, limit int) string {
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
		fmt.Fprintf(&b, "; OnLost: %s", lost.describe(h, m.since))
	}
	return b.String()
}

func (m *monitor) rel(t time.Time) string {
	return fmt.Sprintf("%+.3fs", t.Sub(m.since).Seconds())
}

// leastOf summarises the least PTTL over hs.
func (m *monitor) leastOf(hs []*held) time.Duration {
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

type lostEvent struct {
	at   time.Time
	lock registry.Lock
	err  error
}

// lostLog records OnLost calls; safe for concurrent use.
type lostLog struct {
	mu  sync.Mutex // guards evs
	evs []lostEvent
}

func (l *lostLog) add(lk registry.Lock, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, lostEvent{at: time.Now(), lock: lk, err: err})
}

func (l *lostLog) all() []lostEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// forKey returns the reports of key (on any client).
func (l *lostLog) forKey(key string) []lostEvent {
	var out []lostEvent
	for _, ev := range l.all() {
		if ev.lock.Key == key {
			out = append(out, ev)
		}
	}
	return out
}

// forLock returns the reports of key on client c.
func (l *lostLog) forLock(c redis.UniversalClient, key string) []lostEvent {
	var out []lostEvent
	for _, ev := range l.all() {
		if ev.lock.Key == key && ev.lock.Client == c {
			out = append(out, ev)
		}
	}
	return out
}

// describe lists the reports of h (of its client's copy, when it has one).
func (l *lostLog) describe(h *held, since time.Time) string {
	evs := l.forKey(h.key)
	if h.client != nil {
		evs = l.forLock(h.client, h.key)
	}
	if len(evs) == 0 {
		return "none"
	}
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("[%+.3fs %v]", ev.at.Sub(since).Seconds(), ev.err))
	}
	return strings.Join(parts, " ")
}

// summary counts the reports by reason.
func (l *lostLog) summary() string {
	count := map[string]int{}
	for _, ev := range l.all() {
		count[reasonName(ev.err)]++
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

func reasonName(err error) string {
	switch {
	case errors.Is(err, watchdog.ErrLockGone):
		return "ErrLockGone"
	case errors.Is(err, watchdog.ErrLockTaken):
		return "ErrLockTaken"
	case errors.Is(err, watchdog.ErrUnreachable):
		return "ErrUnreachable"
	case errors.Is(err, watchdog.ErrMaxHold):
		return "ErrMaxHold"
	}
	return fmt.Sprintf("other(%v)", err)
}

// waitReported waits until every key of hs has been reported on c (nil:
// any client), or within has passed; it returns the keys not reported.
func (l *lostLog) waitReported(c redis.UniversalClient, hs []*held, within time.Duration) []*held {
	deadline := time.Now().Add(within)
	for {
		var missing []*held
		for _, h := range hs {
			var evs []lostEvent
			if c == nil {
				evs = l.forKey(h.key)
			} else {
				evs = l.forLock(c, h.key)
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

// ---------------------------------------------------------------------------
// Errors.

// chainHas reports whether match holds for err or any error it wraps,
// following both Unwrap() error and Unwrap() []error, as errors.Is does.
func chainHas(err error, match func(error) bool) bool {
	if err == nil {
		return false
	}
	if match(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return chainHas(u.Unwrap(), match)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if chainHas(e, match) {
				return true
			}
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// Commands sent through a client.

// sentLog is a go-redis hook that records when each command passed through
// a client (whether or not it reached a server).
type sentLog struct {
	mu   sync.Mutex // guards cmds
	cmds []sentCmd
}

type sentCmd struct {
	at   time.Time
	name string
	args string
}

var _ redis.Hook = (*sentLog)(nil)

func (s *sentLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sentLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.add(cmd)
		return next(ctx, cmd)
	}
}

func (s *sentLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.add(c)
		}
		return next(ctx, cmds)
	}
}

func (s *sentLog) add(cmd redis.Cmder) {
	args := fmt.Sprint(cmd.Args())
	if len(args) > 120 {
		args = args[:120] + "..."
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds = append(s.cmds, sentCmd{at: now, name: cmd.Name(), args: args})
}

// since returns the commands recorded at or after t.
func (s *sentLog) since(t time.Time) []sentCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sentCmd
	for _, c := range s.cmds {
		if !c.at.Before(t) {
			out = append(out, c)
		}
	}
	return out
}

// lockedBuffer keeps the first 4 MiB written to it; safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() < 4<<20 {
		b.b.Write(p)
	}
	return len(p), nil
}

// tail returns the last n lines.
func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(b.b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d earlier lines", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// lagNote describes this process's scheduling lag over the last window.
func (a *app) lagNote(window time.Duration) string {
	return fmt.Sprintf(" (this test process was woken late by up to %v in the last %v)", a.lag.Since(time.Now().Add(-window)), window.Round(time.Millisecond))
}
