package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/faultproxy"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// slack is the fixed timing tolerance of these real-time tests: a loopback
// round trip, the race detector, scheduling. The measured lag of this
// process is added on top (see lagmeter).
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
// that talks to the server directly and is never watched, and, once attach
// is called, the application: a registry watching app and an attached
// watchdog (the embedded harness.App).
type env struct {
	*harness.App
	t     testing.TB
	srv   *testredis.Server
	proxy *faultproxy.Proxy // nil when the application talks to the server directly
	app   *redis.Client
	spy   *redis.Client
	lag   *lagmeter.Meter
	sent  *harness.SentLog // every command sent through app, after attach
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

// attach follows the start-up contract on app (harness.App), with a
// recorder of what app sends and opts.
func (e *env) attach(opts ...watchdog.Option) {
	e.t.Helper()
	reg := harness.Watch(e.t, e.app)
	e.sent = harness.Record(e.app)
	e.App = harness.Attach(e.t, reg, harness.Config{Options: opts, Lag: e.lag})
}

// ---------------------------------------------------------------------------
// Locks, obtained through the upstream libraries on the watched client.

// obtainAll obtains, through app, one lock per library and TTL, under keys
// prefix:lib:ttl.
func (e *env) obtainAll(prefix string, ttls ...time.Duration) []*harness.Held {
	e.t.Helper()
	var hs []*harness.Held
	for _, ttl := range ttls {
		for _, lib := range harness.Libs {
			hs = append(hs, harness.MustObtain(e.t, lib, e.app, fmt.Sprintf("%s:%s:%v", prefix, lib, ttl), ttl))
		}
	}
	return hs
}

// releaseAll releases every lock through its library, expecting success:
// each still held with its own value.
func (e *env) releaseAll(hs []*harness.Held) {
	e.t.Helper()
	for _, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.Release(ctx); err != nil {
			e.t.Errorf("release %v: got %v, want nil", h, err)
		}
		cancel()
	}
	if n := len(e.Reg.Locks()); n != 0 {
		e.t.Errorf("registry after releasing every lock: got %d tracked, want 0", n)
	}
}

// ---------------------------------------------------------------------------
// Looking at the server directly.

// mustStates reads every key's value and TTL atomically through the spy,
// and fails the test when the server does not answer.
func (e *env) mustStates(keys []string) map[string]harness.KeyState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := harness.ReadKeys(ctx, e.spy, keys, harness.Atomic)
	if err := harness.FirstErr(st, keys); err != nil {
		e.t.Fatalf("GET+PTTL through the spy: got %v, want nil", err)
	}
	return st
}

// heldChecker checks, sample after sample, that locks are held on the server
// with their values and at least a third of their TTL (minus the tolerance),
// and keeps the least TTL each had, as a fraction of its TTL.
type heldChecker struct {
	e     *env
	hs    []*harness.Held
	floor bool                     // check the TTL floor, not only presence
	least map[string]time.Duration // key -> least PTTL seen
	n     int                      // samples taken
}

func (e *env) newHeldChecker(hs []*harness.Held, floor bool) *heldChecker {
	return &heldChecker{e: e, hs: hs, floor: floor, least: make(map[string]time.Duration)}
}

// check takes one sample; extra widens the TTL floor's tolerance (e.g. by
// added network latency).
func (c *heldChecker) check(st map[string]harness.KeyState, extra time.Duration) {
	c.e.t.Helper()
	c.n++
	for _, h := range c.hs {
		s := st[h.Key]
		switch {
		case !s.Exists:
			now := time.Now()
			c.e.lag.NotJudged(c.e.t, h.TTL, now.Add(-h.TTL), now, "%v: key gone on the server", h)
			c.e.t.Fatalf("%v: key gone on the server, want it held with %q%s", h, h.Value, c.e.lag.Note(h.TTL))
		case s.Value != h.Value:
			c.e.t.Fatalf("%v: GET = %q, want %q", h, s.Value, h.Value)
		}
		if c.floor {
			if tol := slack + extra + c.e.lag.Since(time.Now().Add(-h.TTL)); s.PTTL < h.TTL/3-tol {
				now := time.Now()
				c.e.lag.NotJudged(c.e.t, h.TTL, now.Add(-h.TTL), now, "%v: PTTL %v", h, s.PTTL)
				c.e.t.Fatalf("%v: PTTL %v, want >= %v (a third of the TTL, %v tolerance)%s", h, s.PTTL, h.TTL/3-tol, tol, c.e.lag.Note(h.TTL))
			}
		}
		if l, ok := c.least[h.Key]; !ok || s.PTTL < l {
			c.least[h.Key] = s.PTTL
		}
	}
}

// summary describes the least TTL of each lock as a fraction of its TTL.
func (c *heldChecker) summary() string {
	var parts []string
	for _, h := range c.hs {
		parts = append(parts, fmt.Sprintf("%s %v: least PTTL %v (%.0f%%)", h.Lib, h.TTL, c.least[h.Key], 100*float64(c.least[h.Key])/float64(h.TTL)))
	}
	return fmt.Sprintf("%d samples; %s", c.n, strings.Join(parts, "; "))
}

// renewalsOf returns each tracked lock's renewal count, by key.
func (e *env) renewalsOf(hs []*harness.Held) map[string]int64 {
	out := make(map[string]int64, len(hs))
	for _, h := range hs {
		if l, ok := e.Tracked(h.Key); ok {
			out[h.Key] = l.Renewals
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Losses and commands sent.

// waitLost waits until OnLost has reported every key, or until deadline
// (plus this process's lag since the wait began); it returns the first
// report of each key.
func (e *env) waitLost(keys []string, within time.Duration) map[string]harness.LostEvent {
	e.t.Helper()
	start := time.Now()
	for {
		got := make(map[string]harness.LostEvent)
		var missing []string
		for _, k := range keys {
			if evs := e.Lost.ForKey(k); len(evs) > 0 {
				got[k] = evs[0]
			} else {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return got
		}
		if time.Since(start) > within+e.lag.Since(start) {
			e.t.Fatalf("OnLost: no report within %v for %v%s", within, missing, e.lag.Note(time.Since(start)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mentioning returns the commands app sent at or after since with key among
// their arguments.
func (e *env) mentioning(key string, since time.Time) []harness.SentCmd {
	var out []harness.SentCmd
	for _, c := range e.sent.Since(since) {
		if c.Names(key) {
			out = append(out, c)
		}
	}
	return out
}

// renewBySource returns how many renew script calls app sent with the
// script's source (EVAL, not EVALSHA) at or after since.
func (e *env) renewBySource(since time.Time) int {
	n := 0
	for _, c := range e.sent.Since(since) {
		if c.IsRenewBySource() {
			n++
		}
	}
	return n
}
