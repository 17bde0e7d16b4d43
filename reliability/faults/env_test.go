package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/faultproxy"
	"github.com/lockwatch/lockwatch/internal/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/scripts"
	"github.com/lockwatch/lockwatch/watchdog"
)

// slack is the fixed timing tolerance of these real-time tests: a loopback
// round trip, the race detector, scheduling. The measured lag of this
// process is added on top (see lagMeter).
const slack = 25 * time.Millisecond

// clientMode is a set of go-redis options that keeps a silent connection
// from blocking the watched client for long.
type clientMode struct {
	name string
	set  func(*redis.Options)
}

var clientModes = []clientMode{
	// Socket deadlines of 1 s; context deadlines are not applied to socket
	// reads (go-redis's default).
	{name: "readtimeout=1s", set: func(o *redis.Options) {
		o.ReadTimeout = time.Second
		o.WriteTimeout = time.Second
	}},
	// Context deadlines applied to socket reads and writes (the README's
	// advice); the default 3 s socket timeouts otherwise.
	{name: "ctxtimeout", set: func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
}

// env is one redis-server, optionally a fault proxy in front of it, the
// application's watched client (through the proxy, if any), a spy client
// that talks to the server directly and is never watched, a registry and an
// attached watchdog.
type env struct {
	t     testing.TB
	srv   *testredis.Server
	proxy *faultproxy.Proxy // nil when the application talks to the server directly
	app   *redis.Client
	spy   *redis.Client
	lag   *lagmeter.Meter

	reg  *registry.Registry
	wd   *watchdog.Watchdog
	lost *lostLog
	sent *sentLog
	logs *lockedBuffer
}

type envConfig struct {
	server testredis.Options
	proxy  bool
	client func(*redis.Options) // nil for go-redis's defaults
}

// newEnv starts the server (skipping t without redis-server, see
// testredis), the proxy if asked, and the clients. Everything is closed in
// t.Cleanup.
func newEnv(t testing.TB, c envConfig) *env {
	t.Helper()
	e := &env{t: t, srv: testredis.StartWith(t, c.server)}
	addr := e.srv.Addr
	if c.proxy {
		p, err := faultproxy.New(addr)
		if err != nil {
			t.Fatalf("faultproxy.New: got %v, want nil", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		e.proxy = p
		addr = p.Addr()
	}
	o := &redis.Options{Addr: addr}
	if c.client != nil {
		c.client(o)
	}
	e.app = redis.NewClient(o)
	e.spy = redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	t.Cleanup(func() {
		_ = e.app.Close()
		_ = e.spy.Close()
	})
	e.lag = lagmeter.Start(t)
	if err := e.spy.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING %s: got %v, want nil", e.srv.Addr, err)
	}
	return e
}

// attach follows the start-up contract on app: a registry with both
// adapters watches it, a recorder logs what it sends, and a watchdog is
// attached with an OnLost that records losses, a logger shown when the test
// fails, and opts. The watchdog is stopped in t.Cleanup.
func (e *env) attach(opts ...watchdog.Option) {
	t := e.t
	t.Helper()
	e.reg = registry.New(bsmredislock.New(), goredsync.New())
	if err := e.reg.Watch(e.app); err != nil {
		t.Fatalf("Watch: got %v, want nil", err)
	}
	e.sent = &sentLog{}
	e.app.AddHook(e.sent)
	e.lost = &lostLog{}
	e.logs = &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	all := append([]watchdog.Option{watchdog.WithOnLost(e.lost.add), watchdog.WithLogger(logger)}, opts...)
	wd, err := watchdog.Attach(e.reg, all...)
	if err != nil {
		t.Fatalf("watchdog.Attach: got %v, want nil", err)
	}
	e.wd = wd
	t.Cleanup(func() {
		start := time.Now()
		wd.Stop()
		if d := time.Since(start); d > time.Second {
			t.Logf("watchdog.Stop took %v (renewals stuck on silent connections)", d)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watchdog log:\n%s", e.logs.String())
		}
	})
}

// ---------------------------------------------------------------------------
// Locks, obtained through the upstream libraries on the watched client.

// held is one lock obtained through redislock or redsync.
type held struct {
	lib     string
	key     string
	value   string
	ttl     time.Duration
	release func(ctx context.Context) error
}

func (h *held) String() string { return fmt.Sprintf("%s %s (TTL %v)", h.lib, h.key, h.ttl) }

var libNames = []string{"redislock", "redsync"}

// obtain obtains key for ttl through the named library on c, once.
func obtain(ctx context.Context, lib string, c *redis.Client, key string, ttl time.Duration) (*held, error) {
	switch lib {
	case "redislock":
		l, err := redislock.New(c).Obtain(ctx, key, ttl, nil)
		if err != nil {
			return nil, err
		}
		return &held{lib: lib, key: key, value: l.Token() + l.Metadata(), ttl: ttl, release: l.Release}, nil
	case "redsync":
		// redsync gives an attempt 5 % of the expiry by default (15 ms for
		// 300 ms), too little for a dial on a loaded machine; these tests
		// are about what happens once the lock is held.
		m := redsync.New(goredis.NewPool(c)).NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1),
			redsync.WithTimeoutFactor(0.5))
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		release := func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock answered false")
			}
			return err
		}
		return &held{lib: lib, key: key, value: m.Value(), ttl: ttl, release: release}, nil
	}
	return nil, fmt.Errorf("unknown library %q", lib)
}

// obtainAll obtains, through app, one lock per library and TTL, under keys
// prefix:lib:ttl.
func (e *env) obtainAll(prefix string, ttls ...time.Duration) []*held {
	e.t.Helper()
	var hs []*held
	for _, ttl := range ttls {
		for _, lib := range libNames {
			key := fmt.Sprintf("%s:%s:%v", prefix, lib, ttl)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			h, err := obtain(ctx, lib, e.app, key, ttl)
			cancel()
			if err != nil {
				e.t.Fatalf("%s obtain %q for %v: got %v, want nil", lib, key, ttl, err)
			}
			hs = append(hs, h)
		}
	}
	return hs
}

// releaseAll releases every lock through its library, expecting success:
// each still held with its own value.
func (e *env) releaseAll(hs []*held) {
	e.t.Helper()
	for _, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.release(ctx); err != nil {
			e.t.Errorf("release %v: got %v, want nil", h, err)
		}
		cancel()
	}
	if n := len(e.reg.Locks()); n != 0 {
		e.t.Errorf("registry after releasing every lock: got %d tracked, want 0", n)
	}
}

// tracked returns the registry's lock under key.
func (e *env) tracked(key string) (registry.Lock, bool) {
	for _, l := range e.reg.Locks() {
		if l.Key == key {
			return l, true
		}
	}
	return registry.Lock{}, false
}

// ---------------------------------------------------------------------------
// Looking at the server directly.

// keyState is what the server holds under a key.
type keyState struct {
	value  string
	exists bool
	pttl   time.Duration // -1 without expiry
}

// states reads every key's value and TTL atomically through the spy. It
// returns an error when the server does not answer (it is restarting).
func (e *env) states(keys []string) (map[string]keyState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	_, err := e.spy.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i] = p.Get(ctx, k)
			pttls[i] = p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make(map[string]keyState, len(keys))
	for i, k := range keys {
		v, err := gets[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			out[k] = keyState{}
		case err != nil:
			return nil, err
		default:
			out[k] = keyState{value: v, exists: true, pttl: pttls[i].Val()}
		}
	}
	return out, nil
}

// mustStates is states that fails the test when the server does not answer.
func (e *env) mustStates(keys []string) map[string]keyState {
	e.t.Helper()
	s, err := e.states(keys)
	if err != nil {
		e.t.Fatalf("GET+PTTL through the spy: got %v, want nil", err)
	}
	return s
}

func keysOf(hs []*held) []string {
	keys := make([]string, len(hs))
	for i, h := range hs {
		keys[i] = h.key
	}
	return keys
}

// heldChecker checks, sample after sample, that locks are held on the server
// with their values and at least a third of their TTL (minus the tolerance),
// and keeps the least TTL each had, as a fraction of its TTL.
type heldChecker struct {
	e     *env
	hs    []*held
	floor bool                     // check the TTL floor, not only presence
	least map[string]time.Duration // key -> least PTTL seen
	n     int                      // samples taken
}

func (e *env) newHeldChecker(hs []*held, floor bool) *heldChecker {
	return &heldChecker{e: e, hs: hs, floor: floor, least: make(map[string]time.Duration)}
}

// check takes one sample; extra widens the TTL floor's tolerance (e.g. by
// added network latency).
func (c *heldChecker) check(st map[string]keyState, extra time.Duration) {
	c.e.t.Helper()
	c.n++
	for _, h := range c.hs {
		s := st[h.key]
		switch {
		case !s.exists:
			c.e.t.Fatalf("%v: key gone on the server, want it held with %q%s", h, h.value, c.e.lagNote(h.ttl))
		case s.value != h.value:
			c.e.t.Fatalf("%v: GET = %q, want %q", h, s.value, h.value)
		}
		if c.floor {
			if tol := slack + extra + c.e.lagSince(time.Now().Add(-h.ttl)); s.pttl < h.ttl/3-tol {
				c.e.t.Fatalf("%v: PTTL %v, want >= %v (a third of the TTL, %v tolerance)%s", h, s.pttl, h.ttl/3-tol, tol, c.e.lagNote(h.ttl))
			}
		}
		if l, ok := c.least[h.key]; !ok || s.pttl < l {
			c.least[h.key] = s.pttl
		}
	}
}

// summary describes the least TTL of each lock as a fraction of its TTL.
func (c *heldChecker) summary() string {
	var parts []string
	for _, h := range c.hs {
		parts = append(parts, fmt.Sprintf("%s %v: least PTTL %v (%.0f%%)", h.lib, h.ttl, c.least[h.key], 100*float64(c.least[h.key])/float64(h.ttl)))
	}
	return fmt.Sprintf("%d samples; %s", c.n, strings.Join(parts, "; "))
}

// renewalsOf returns each tracked lock's renewal count, by key.
func (e *env) renewalsOf(hs []*held) map[string]int64 {
	out := make(map[string]int64, len(hs))
	for _, h := range hs {
		if l, ok := e.tracked(h.key); ok {
			out[h.key] = l.Renewals
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Recording: losses and commands sent.

type lostEvent struct {
	at   time.Time
	lock registry.Lock
	err  error
}

// lostLog records OnLost calls; it is safe for concurrent use.
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

func (l *lostLog) forKey(key string) []lostEvent {
	var out []lostEvent
	for _, ev := range l.all() {
		if ev.lock.Key == key {
			out = append(out, ev)
		}
	}
	return out
}

// waitLost waits until OnLost has reported every key, or until deadline
// (plus this process's lag since the wait began); it returns the first
// report of each key.
func (e *env) waitLost(keys []string, within time.Duration) map[string]lostEvent {
	e.t.Helper()
	start := time.Now()
	for {
		got := make(map[string]lostEvent)
		for _, k := range keys {
			if evs := e.lost.forKey(k); len(evs) > 0 {
				got[k] = evs[0]
			}
		}
		if len(got) == len(keys) {
			return got
		}
		if time.Since(start) > within+e.lagSince(start) {
			var missing []string
			for _, k := range keys {
				if _, ok := got[k]; !ok {
					missing = append(missing, k)
				}
			}
			e.t.Fatalf("OnLost: no report within %v for %v%s", within, missing, e.lagNote(time.Since(start)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sentCmd is one command the watched client sent, when its hook saw it.
type sentCmd struct {
	at   time.Time
	args []string
}

// sentLog is a go-redis hook that records every command sent through a
// client, with the time it was handed to the connection.
type sentLog struct {
	mu   sync.Mutex // guards cmds
	cmds []sentCmd
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
	raw := cmd.Args()
	args := make([]string, len(raw))
	for i, a := range raw {
		args[i] = fmt.Sprint(a)
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds = append(s.cmds, sentCmd{at: now, args: args})
}

// mentioning returns the commands sent at or after since with key among
// their arguments.
func (s *sentLog) mentioning(key string, since time.Time) []sentCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sentCmd
	for _, c := range s.cmds {
		if !c.at.Before(since) && slices.Contains(c.args[1:], key) {
			out = append(out, c)
		}
	}
	return out
}

// renewBySource returns the renew script calls sent with the script's
// source (EVAL, not EVALSHA) at or after since.
func (s *sentLog) renewBySource(since time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.cmds {
		if !c.at.Before(since) && len(c.args) > 1 && strings.EqualFold(c.args[0], "eval") && c.args[1] == scripts.RenewSource() {
			n++
		}
	}
	return n
}

func describe(cmds []sentCmd) string {
	var b strings.Builder
	for _, c := range cmds {
		args := c.args
		if len(args) > 1 && len(args[1]) > 40 {
			args = slices.Clone(args)
			args[1] = args[1][:40] + "..."
		}
		fmt.Fprintf(&b, "\n  %s %s", c.at.Format("15:04:05.000000"), strings.Join(args, " "))
	}
	return b.String()
}

// lockedBuffer keeps the first megabyte written to it; safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() < 1<<20 {
		b.b.Write(p)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ---------------------------------------------------------------------------
// Scheduling lag.

// lagSince returns the longest scheduling lag measured since t.
func (e *env) lagSince(t time.Time) time.Duration { return e.lag.Since(t) }

// lagNote describes the lag over the last window, for failure messages.
func (e *env) lagNote(window time.Duration) string {
	return fmt.Sprintf("; this process was late by up to %v in the last %v", e.lagSince(time.Now().Add(-window)), window)
}
