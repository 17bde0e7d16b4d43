package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

const (
	// ttl is the expiry of every lock in this package: short, so that a
	// loss shows within a second.
	ttl = time.Second
	// renewalPeriod is how often the fast lane renews a lock whose TTL is
	// short against the schedule: a third of its TTL.
	renewalPeriod = ttl / 3
	// floor is the least PTTL a held lock may show (invariant I2).
	floor = ttl / 3
	// slack is the fixed timing tolerance of these real-time tests (a
	// loopback round trip, the race detector, scheduling); the lateness
	// of this process measured by lagmeter is added on top.
	slack = 300 * time.Millisecond
	// sample is how often a monitor reads the keys.
	sample = 25 * time.Millisecond
	// settle is how long after a loss a renewal that was already on its
	// way may still land: a PTTL rise seen later is a renewal sent after
	// the watchdog gave the lock up.
	settle = 100 * time.Millisecond
)

// sideBySide runs each scenario as a subtest of t, all at once: t.Run from
// several goroutines rather than t.Parallel, which -parallel would bound by
// GOMAXPROCS (2 here), while these scenarios spend their time sleeping.
func sideBySide(t *testing.T, names []string, run func(t *testing.T, i int)) {
	t.Helper()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { t.Run(name, func(t *testing.T) { run(t, i) }) })
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------
// Servers.

// server is one real redis-server with the application's client (watched
// by the app's registry) and a spy client (never watched) that reads and
// writes keys as an intruder or an observer would.
type server struct {
	idx int
	srv *testredis.Server
	c   *redis.Client // the application's; watched
	spy *redis.Client // never watched
}

func (s *server) String() string { return fmt.Sprintf("server %d (%s)", s.idx, s.srv.Addr) }

// exitedSlowly reports whether s's server, killed, took so long to exit
// that it may have been silent, not refusing connections, when its locks
// were given up: longer than a tenth of the TTL, within the hedge wait of a
// renewal sent at the kill (a sixth). A redis-server SIGKILLed exits in
// 2-15 ms here; beside two burners and the -race suite, CI run 92 and its
// repeats saw exits of 0.3 s and up to 6.7 s, whose locks were rightly
// given up as not answered.
func (s *server) exitedSlowly() bool { return s.srv.KillTook() > ttl/10 }

// startServers starts n redis-servers on free ports, each with its
// application client and its spy.
func startServers(t *testing.T, n int) []*server {
	t.Helper()
	out := make([]*server, n)
	for i := range n {
		srv := testredis.Start(t)
		s := &server{
			idx: i,
			srv: srv,
			c:   redis.NewClient(&redis.Options{Addr: srv.Addr}),
			spy: redis.NewClient(&redis.Options{
				Addr: srv.Addr, MaxRetries: -1,
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
			}),
		}
		t.Cleanup(func() {
			_ = s.c.Close()
			_ = s.spy.Close()
			if !s.srv.Running() {
				// After enough failed dials, a go-redis pool redials from
				// a goroutine of its own every second until it succeeds
				// or sees the pool closed: let it see it, for goleak.
				time.Sleep(1100 * time.Millisecond)
			}
		})
		out[i] = s
	}
	return out
}

func clientsOf(ss []*server) []*redis.Client {
	out := make([]*redis.Client, len(ss))
	for i, s := range ss {
		out[i] = s.c
	}
	return out
}

// serverOf names the server a watched client talks to.
func serverOf(ss []*server, c redis.UniversalClient) string {
	for _, s := range ss {
		if redis.UniversalClient(s.c) == c {
			return s.String()
		}
	}
	return fmt.Sprintf("an unknown client %p", c)
}

// ---------------------------------------------------------------------------
// The application: one registry with both adapters watching every client,
// one watchdog attached (harness.App), and what the scenarios follow of it.

type app struct {
	*harness.App
	t       *testing.T
	servers []*server
	lost    *lostLog // OnLost calls, with the state of the key's followed context
	copies  *copyLog
	start   time.Time // what times in messages are relative to
	unblock chan struct{}

	mu       sync.Mutex // guards contexts
	contexts map[string]*followed
}

type appConfig struct {
	// onLostBlock is how long OnLost blocks after it recorded its call (a
	// slow callback); it is cut short when the test ends.
	onLostBlock time.Duration
	opts        []watchdog.Option
}

func newApp(t *testing.T, ss []*server, lag *lagmeter.Meter, cfg appConfig) *app {
	t.Helper()
	a := &app{
		t: t, servers: ss, lost: &lostLog{}, copies: &copyLog{},
		start: time.Now(), unblock: make(chan struct{}), contexts: map[string]*followed{},
	}
	onLost := func(l registry.Lock, err error) {
		ev := lostEvent{LostEvent: harness.LostEvent{At: time.Now(), Lock: l, Err: err}, ctxDone: -1}
		if f := a.followedFor(l.Key); f != nil {
			ev.ctxDone = 0
			if f.ctx.Err() != nil {
				ev.ctxDone = 1
			}
		}
		a.lost.Add(ev)
		if cfg.onLostBlock > 0 {
			select {
			case <-time.After(cfg.onLostBlock):
			case <-a.unblock:
			}
		}
		a.lost.rets.Add(time.Now())
	}
	a.App = harness.NewApp(t, clientsOf(ss), harness.Config{Options: cfg.opts, OnLost: onLost, Lag: lag, LogTail: 40})
	t.Cleanup(a.WD.AddObserver(a.copies))
	t.Cleanup(func() { close(a.unblock) }) // before Stop waits for OnLost
	return a
}

func (a *app) rel(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%+.3fs", at.Sub(a.start).Seconds())
}

// lateBy is how late this process's goroutines were woken since at: the
// watchdog's timers were late by as much.
func (a *app) lateBy(at time.Time) time.Duration { return a.Lag.Since(at) }

// giveUpWithin bounds how long after at, when a copy's server died, the
// watchdog may take to give the copy up: its key may live a TTL past its
// last renewal, and the watchdog waits past that by four times how late
// it runs, at most a TTL more (I12), for an answer that may still come.
// CI run 158 here (the race step beside two CPU burners) gave a copy up
// 1.60 s after its server's SIGKILL, 0.93 s past its key's expiry, while
// the bound was a TTL, the slack and one lateness. The time s's server
// took to exit after its SIGKILL comes first: until then it was silent,
// not refusing, as a stalled server is, and a renewal the watchdog sent it
// then may, for all the watchdog knows, have been applied (local CI run
// 221: a server took 1.70 s to exit, its copy was given up 1.90 s after
// the kill).
func (a *app) giveUpWithin(at time.Time, s *server) time.Duration {
	return s.srv.KillTook() + ttl + slack + min(4*a.lateBy(at), ttl)
}

// ---------------------------------------------------------------------------
// Contexts from Watchdog.Context, watched.

// followed is a context from Watchdog.Context and when it ended.
type followed struct {
	key    string
	asked  time.Time
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once doneAt and cause are set
	doneAt time.Time
	cause  error
}

// follow asks the watchdog for key's context and records when it ends.
func (a *app) follow(key string) *followed {
	f := &followed{key: key, asked: time.Now(), done: make(chan struct{})}
	f.ctx, f.cancel = a.WD.Context(context.Background(), key)
	go func() {
		<-f.ctx.Done()
		f.doneAt, f.cause = time.Now(), context.Cause(f.ctx)
		close(f.done)
	}()
	a.t.Cleanup(func() { f.cancel(); <-f.done })
	a.mu.Lock()
	a.contexts[key] = f
	a.mu.Unlock()
	return f
}

func (a *app) followedFor(key string) *followed {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.contexts[key]
}

// ended reports whether the context has ended (it reads ctx.Err(), not
// what the watching goroutine recorded, which may come a moment later:
// call wait before reading doneAt and cause).
func (f *followed) ended() bool { return f.ctx.Err() != nil }

// wait waits until the context ends or within passes; it reports whether
// it ended.
func (f *followed) wait(within time.Duration) bool {
	select {
	case <-f.done:
		return true
	case <-time.After(within):
		return false
	}
}

// describe tells how the context stands, for messages.
func (f *followed) describe(a *app) string {
	if !f.ended() || !f.wait(time.Second) {
		return fmt.Sprintf("context of %q (asked at %s) not cancelled", f.key, a.rel(f.asked))
	}
	return fmt.Sprintf("context of %q cancelled at %s with cause %v", f.key, a.rel(f.doneAt), f.cause)
}

// ---------------------------------------------------------------------------
// OnLost and CopyLost records.

// lostEvent is an OnLost call and whether the key's followed context had
// ended when it was made.
type lostEvent struct {
	harness.LostEvent
	ctxDone int // 1: the key's followed context had ended when OnLost was called; 0: not; -1: none followed
}

// lostLog records OnLost calls and when each returned; safe for
// concurrent use.
type lostLog struct {
	harness.Log[lostEvent]
	rets harness.Log[time.Time] // when each call returned
}

func (l *lostLog) returns() []time.Time { return l.rets.All() }

// waitFor waits until key has been reported, or within has passed, and
// returns its reports.
func (l *lostLog) waitFor(key string, within time.Duration) []lostEvent {
	return l.Wait(func(ev lostEvent) bool { return ev.Lock.Key == key }, within)
}

// describe lists every OnLost call, for messages.
func (l *lostLog) describe(a *app) string {
	evs := l.All()
	if len(evs) == 0 {
		return "OnLost: never called"
	}
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("[%s %q on %s: %v (context already cancelled: %v)]",
			a.rel(ev.At), ev.Lock.Key, serverOf(a.servers, ev.Lock.Client), ev.Err, map[int]string{1: "yes", 0: "no", -1: "none followed"}[ev.ctxDone]))
	}
	return fmt.Sprintf("OnLost: %d calls %s", len(evs), strings.Join(parts, " "))
}

type copyEvent struct {
	at           time.Time
	lock         registry.Lock
	reason       error
	held, quorum int
}

// copyLog is a watchdog.CopyObserver that records the copies of a lock
// over several servers lost while a majority still held it.
type copyLog struct{ harness.Log[copyEvent] }

var _ watchdog.CopyObserver = (*copyLog)(nil)

func (c *copyLog) Renewed(string, int, float64)   {}
func (c *copyLog) RenewFailed(string, int, error) {}
func (c *copyLog) Lost(registry.Lock, error)      {}
func (c *copyLog) Swept(string, time.Duration)    {}
func (c *copyLog) CopyLost(l registry.Lock, reason error, held, quorum int) {
	c.Add(copyEvent{at: time.Now(), lock: l, reason: reason, held: held, quorum: quorum})
}

// waitFor waits until a copy on client cl has been reported lost, or
// within has passed.
func (c *copyLog) waitFor(cl *redis.Client, within time.Duration) (copyEvent, bool) {
	evs := c.Wait(func(ev copyEvent) bool { return ev.lock.Client == redis.UniversalClient(cl) }, within)
	if len(evs) == 0 {
		return copyEvent{}, false
	}
	return evs[0], true
}

func (c *copyLog) describe(a *app) string {
	evs := c.All()
	if len(evs) == 0 {
		return "CopyLost: none"
	}
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("[%s copy on %s: %v; %d held, %d needed]", a.rel(ev.at), serverOf(a.servers, ev.lock.Client), ev.reason, ev.held, ev.quorum))
	}
	return "CopyLost: " + strings.Join(parts, " ")
}

// ---------------------------------------------------------------------------
// Redsync mutexes, as users make them.

// newMutex makes a redsync mutex over one pool per client (see
// harness.NewMutex), with TTL expiry, tries tries and 50 ms between them.
func newMutex[C redis.UniversalClient](clients []C, key string, expiry time.Duration, tries int) *redsync.Mutex {
	return harness.NewMutex(clients, key, expiry, redsync.WithTries(tries), redsync.WithRetryDelay(50*time.Millisecond))
}

// taker is another process: a redsync mutex over clients of its own,
// never watched by anything.
type taker struct {
	t       *testing.T
	servers []*server
	m       *redsync.Mutex
}

func newTaker(t *testing.T, ss []*server, key string) *taker {
	var cs []*redis.Client
	for _, s := range ss {
		c := redis.NewClient(&redis.Options{Addr: s.srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	// The taker holds for longer than the checks after it take: with the
	// mutex's own TTL its value could expire before the last read of it
	// on a loaded host (CI of stop 56: it was read 1 s after it was
	// taken, and was gone). It is released when the test is done.
	return &taker{t: t, servers: ss, m: newMutex(cs, key, takerTTL, 1)}
}

// takerTTL is how long another process's mutex lives unless released.
const takerTTL = 30 * time.Second

func (k *taker) String() string {
	var names []string
	for _, s := range k.servers {
		names = append(names, s.String())
	}
	return fmt.Sprintf("another process (a redsync of its own over %s)", strings.Join(names, ", "))
}

// try makes one attempt.
func (k *taker) try() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return k.m.LockContext(ctx)
}

// taken is what takeBy saw.
type taken struct {
	at   time.Time // when the mutex was taken; zero: it was not
	held time.Time // when an attempt last found it held on a server
	err  error     // the last attempt's error
}

// takeBy tries every 20 ms until it gets the mutex or deadline passes.
func (k *taker) takeBy(deadline time.Time) taken {
	var tk taken
	for {
		err := k.try()
		if err == nil {
			tk.at, tk.err = time.Now(), nil
			return tk
		}
		var all *redsync.ErrTaken
		var one *redsync.ErrNodeTaken
		if errors.As(err, &all) || errors.As(err, &one) {
			tk.held = time.Now()
		}
		tk.err = err
		if time.Now().After(deadline) {
			return tk
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// late reports whether tk took the mutex later than limit after from
// because the mutex was held: an attempt found it held on a server later
// than that. Attempts that failed otherwise are the taker's own: redsync
// gives each server 5 % of the TTL (50 ms) to answer, and beside two
// burners and the -race suite servers took longer for seconds (CI run 92's
// repeats), while nothing held the mutex. Those are logged.
func (tk taken) late(t *testing.T, who fmt.Stringer, from time.Time, limit time.Duration, what string) bool {
	took := tk.at.Sub(from)
	switch {
	case took <= limit:
		return false
	case tk.held.Sub(from) > limit:
		return true
	}
	held := "no attempt found it held"
	if !tk.held.IsZero() {
		held = fmt.Sprintf("the last attempt that found it held was %v after it", tk.held.Sub(from).Round(time.Millisecond))
	}
	t.Logf("%v took the mutex %v after %s, over %v, but %s: the attempts after failed for want of answers in time", who, took.Round(time.Millisecond), what, limit.Round(time.Millisecond), held)
	return false
}

func (k *taker) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = k.m.UnlockContext(ctx)
}

// ---------------------------------------------------------------------------
// Reading a key on every server from outside, through the spies.

// obs is one reading of the key on one server.
type obs struct {
	sent time.Time // when the reading was sent
	at   time.Time // when its reply arrived
	harness.KeyState
}

// monitor reads one key on every server every sample (GET and PTTL in one
// MULTI), through the spies, and keeps every reading.
type monitor struct {
	a       *app
	key     string
	mine    string // the holder's value
	servers []*server

	mu   sync.Mutex // guards obs
	obs  [][]obs    // by server
	stop chan struct{}
	done chan struct{}
}

func startMonitor(a *app, key, mine string) *monitor {
	m := &monitor{a: a, key: key, mine: mine, servers: a.servers, obs: make([][]obs, len(a.servers)),
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.loop()
	a.t.Cleanup(m.halt)
	return m
}

func (m *monitor) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

func (m *monitor) loop() {
	defer close(m.done)
	for {
		m.sampleOnce()
		select {
		case <-m.stop:
			return
		case <-time.After(sample):
		}
	}
}

func (m *monitor) sampleOnce() {
	for i, s := range m.servers {
		o := read(s.spy, m.key)
		m.mu.Lock()
		m.obs[i] = append(m.obs[i], o)
		m.mu.Unlock()
	}
}

// read reads key on c: value and PTTL at the same instant.
func read(c *redis.Client, key string) obs {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	sent := time.Now()
	st := harness.ReadKeys(ctx, c, []string{key}, harness.Atomic)[key]
	return obs{sent: sent, at: time.Now(), KeyState: st}
}

func (m *monitor) readings(i int) []obs {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.obs[i])
}

// least returns the least PTTL server i showed with the holder's value in
// readings sent at from or later and answered by to, and how many such
// readings there were. (A reading sent before from and answered after it
// saw the server before from.)
func (m *monitor) least(i int, from, to time.Time) (time.Duration, int) {
	least, n := time.Duration(-1), 0
	for _, o := range m.readings(i) {
		if o.sent.Before(from) || o.at.After(to) || !o.Exists || o.Value != m.mine {
			continue
		}
		n++
		if least < 0 || o.PTTL < least {
			least = o.PTTL
		}
	}
	return least, n
}

// notMine returns the readings of server i sent at from or later and
// answered by to that found the key absent or holding another value
// (readings that failed are not counted).
func (m *monitor) notMine(i int, from, to time.Time) []obs {
	var out []obs
	for _, o := range m.readings(i) {
		if o.sent.Before(from) || o.at.After(to) || o.Err != nil {
			continue
		}
		if !o.Exists || o.Value != m.mine {
			out = append(out, o)
		}
	}
	return out
}

// goneAt returns the first reading of server i at or after from that
// found the key without the holder's value, or the zero time.
func (m *monitor) goneAt(i int, from time.Time) time.Time {
	for _, o := range m.readings(i) {
		if !o.at.Before(from) && o.Err == nil && (!o.Exists || o.Value != m.mine) {
			return o.at
		}
	}
	return time.Time{}
}

// rises returns the readings of server i taken after from whose PTTL is
// higher than that of the reading before (also after from), both holding
// value: something set a new expiry between them.
func (m *monitor) rises(i int, from time.Time, value string) []obs {
	var out []obs
	var prev *obs
	for _, o := range m.readings(i) {
		if o.sent.Before(from) || o.Err != nil {
			continue
		}
		if !o.Exists || o.Value != value {
			prev = nil
			continue
		}
		if prev != nil && o.PTTL > prev.PTTL+5*time.Millisecond {
			out = append(out, o)
		}
		prev = &o
	}
	return out
}

// recreated returns the first reading of server i after from that found
// the holder's value after a reading that did not: the key came back.
func (m *monitor) recreated(i int, from time.Time) (obs, bool) {
	seenGone := false
	for _, o := range m.readings(i) {
		if o.sent.Before(from) || o.Err != nil {
			continue
		}
		mine := o.Exists && o.Value == m.mine
		if !mine {
			seenGone = true
		} else if seenGone {
			return o, true
		}
	}
	return obs{}, false
}

// timeline describes what server i showed, run by run, for messages.
func (m *monitor) timeline(i int) string {
	rs := m.readings(i)
	if len(rs) == 0 {
		return "no reading"
	}
	kind := func(o obs) string {
		switch {
		case o.Err != nil:
			return "unreadable: " + o.Err.Error()
		case !o.Exists:
			return "absent"
		case o.Value == m.mine:
			return "holder's value"
		}
		return fmt.Sprintf("another value %q", o.Value)
	}
	var b strings.Builder
	start := 0
	for j := 1; j <= len(rs); j++ {
		if j < len(rs) && kind(rs[j]) == kind(rs[start]) {
			continue
		}
		run := rs[start:j]
		fmt.Fprintf(&b, "\n      %s..%s %s (%d readings", m.a.rel(run[0].at), m.a.rel(run[len(run)-1].at), kind(run[0]), len(run))
		if run[0].Exists {
			lo, hi := run[0].PTTL, run[0].PTTL
			for _, o := range run {
				lo, hi = min(lo, o.PTTL), max(hi, o.PTTL)
			}
			fmt.Fprintf(&b, ", PTTL %v..%v, last %v", lo, hi, run[len(run)-1].PTTL)
		}
		b.WriteString(")")
		start = j
	}
	return b.String()
}

// describe tells what every server showed.
func (m *monitor) describe() string {
	var b strings.Builder
	for i, s := range m.servers {
		fmt.Fprintf(&b, "\n    %v:%s", s, m.timeline(i))
	}
	return b.String()
}
