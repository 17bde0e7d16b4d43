package ownership_test

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
	"github.com/lockwatch/lockwatch/internal/lagmeter"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// sample is how often the scenarios look at the keys.
const sample = 25 * time.Millisecond

// stopWait bounds how long a test's cleanup waits for wd.Stop; a Stop that
// takes longer is reported, and the test goes on (its goroutine is left).
const stopWait = 5 * time.Second

// ---------------------------------------------------------------------------
// The application: a registry watching its clients, a watchdog attached.

// app is the README's start-up contract: one registry with both adapters
// watching the application's clients, one watchdog attached with an OnLost
// that records every call, a logger whose output is shown when the test
// fails, and the test's options.
type app struct {
	t    testing.TB
	reg  *registry.Registry
	wd   *watchdog.Watchdog
	lost *lostLog
	logs *lockedBuffer
	lag  *lagmeter.Meter
}

func newApp(t testing.TB, clients []redis.UniversalClient, opts ...watchdog.Option) *app {
	t.Helper()
	a := &app{t: t, lost: &lostLog{}, logs: &lockedBuffer{}, lag: lagmeter.Start(t)}
	a.reg = registry.New(bsmredislock.New(), goredsync.New())
	for _, c := range clients {
		if err := a.reg.Watch(c); err != nil {
			t.Fatalf("reg.Watch(%T): got %v, want nil", c, err)
		}
	}
	logger := slog.New(slog.NewTextHandler(a.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	all := append([]watchdog.Option{watchdog.WithOnLost(a.lost.add), watchdog.WithLogger(logger)}, opts...)
	wd, err := watchdog.Attach(a.reg, all...)
	if err != nil {
		t.Fatalf("watchdog.Attach: got %v, want nil", err)
	}
	a.wd = wd
	t.Cleanup(func() {
		start := time.Now()
		if !within(stopWait, wd.Stop) {
			t.Errorf("cleanup: wd.Stop() did not return within %v, want it to return", stopWait)
			return
		}
		if d := time.Since(start); d > time.Second {
			t.Logf("cleanup: wd.Stop() took %v", d.Round(time.Millisecond))
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watchdog log (Info and above), last lines:\n%s", a.logs.tail(40))
		}
	})
	return a
}

// bound returns base plus the longest lateness this process was woken with
// since start (rounded up to the millisecond): a timer of the watchdog's
// (or the test's own) is that late on a busy machine, whatever the code
// does.
func (a *app) bound(base time.Duration, since time.Time) time.Duration {
	return (base + a.lag.Since(since) + time.Millisecond - 1).Truncate(time.Millisecond)
}

// within runs fn on a goroutine of its own and reports whether it returned
// within d. A call that does not return is left running.
func within(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// ---------------------------------------------------------------------------
// Locks, obtained through the upstream libraries as real users do.

// held is one lock as its holder sees it.
type held struct {
	lib     string
	key     string
	value   string // what the lock stores under key; registry.Lock.Value
	ttl     time.Duration
	release func(context.Context) error
}

func (h *held) String() string {
	return fmt.Sprintf("%s %s (TTL %v, value %s)", h.lib, h.key, h.ttl, short(h.value))
}

// short abbreviates a lock value for messages.
func short(v string) string {
	if len(v) > 12 {
		return v[:12] + "…"
	}
	return v
}

func heldRedislock(l *redislock.Lock, ttl time.Duration) *held {
	return &held{lib: "redislock", key: l.Key(), value: l.Token() + l.Metadata(), ttl: ttl, release: l.Release}
}

func heldRedsync(m *redsync.Mutex, ttl time.Duration) *held {
	release := func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock answered false")
		}
		return err
	}
	return &held{lib: "redsync", key: m.Name(), value: m.Value(), ttl: ttl, release: release}
}

// obtainRedislock obtains key with redislock through c, once, or fails t.
func obtainRedislock(t testing.TB, c redis.UniversalClient, key string, ttl time.Duration) *held {
	t.Helper()
	h, err := tryRedislock(c, key, ttl)
	if err != nil {
		t.Fatalf("redislock Obtain(%q, %v): got %v, want nil", key, ttl, err)
	}
	return h
}

func tryRedislock(c redis.UniversalClient, key string, ttl time.Duration) (*held, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l, err := redislock.New(c).Obtain(ctx, key, ttl, nil)
	if err != nil {
		return nil, err
	}
	return heldRedislock(l, ttl), nil
}

// newMutex is a redsync mutex over the one pool of c. redsync gives an
// attempt 5 % of the expiry by default, too little for a dial under -race:
// half of it here.
func newMutex(c redis.UniversalClient, key string, ttl time.Duration, opts ...redsync.Option) *redsync.Mutex {
	opts = append([]redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(1), redsync.WithTimeoutFactor(0.5)}, opts...)
	return redsync.New(goredis.NewPool(c)).NewMutex(key, opts...)
}

func tryRedsync(c redis.UniversalClient, key string, ttl time.Duration) (*held, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m := newMutex(c, key, ttl)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return heldRedsync(m, ttl), nil
}

// releaseQuietly releases every lock at the end of a test; what the test
// has already looked at is not reported again.
func releaseQuietly(hs ...*held) {
	for _, h := range hs {
		if h == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = h.release(ctx)
		cancel()
	}
}

// ---------------------------------------------------------------------------
// Looking at the keys from outside, through clients that are never watched.

// newSpy returns a client of addr that no registry watches: what it reads
// and deletes is invisible to lockwatch, as another process's would be.
func newSpy(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keyState is what a server holds under a key.
type keyState struct {
	exists bool
	value  string
	pttl   time.Duration
	err    error // the server could not be asked
}

func (s keyState) String() string {
	switch {
	case s.err != nil:
		return fmt.Sprintf("unreadable (%v)", s.err)
	case !s.exists:
		return "gone"
	}
	return fmt.Sprintf("value %s, PTTL %v", short(s.value), s.pttl)
}

// readKeys reads GET and PTTL of keys in one pipeline on c.
func readKeys(c *redis.Client, keys []string) map[string]keyState {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	// Each command's own error is looked at below.
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i] = p.Get(ctx, k)
			pttls[i] = p.PTTL(ctx, k)
		}
		return nil
	})
	out := make(map[string]keyState, len(keys))
	for i, k := range keys {
		v, err := gets[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			out[k] = keyState{}
		case err != nil:
			out[k] = keyState{err: err}
		default:
			out[k] = keyState{exists: true, value: v, pttl: pttls[i].Val(), err: pttls[i].Err()}
		}
	}
	return out
}

// keyWatch samples locks' keys and remembers, for each, the first sample
// that did not find the holder's value, and the least PTTL seen.
type keyWatch struct {
	spy   *redis.Client
	since time.Time
	hs    []*held
	least map[*held]time.Duration
	bad   map[*held]string // the first sample without the holder's value
}

func newKeyWatch(spy *redis.Client, since time.Time, hs ...*held) *keyWatch {
	w := &keyWatch{spy: spy, since: since, hs: hs, least: map[*held]time.Duration{}, bad: map[*held]string{}}
	for _, h := range hs {
		w.least[h] = -1
	}
	return w
}

func (w *keyWatch) sampleOnce() {
	keys := make([]string, len(w.hs))
	for i, h := range w.hs {
		keys[i] = h.key
	}
	st := readKeys(w.spy, keys)
	now := time.Now()
	for _, h := range w.hs {
		s := st[h.key]
		if s.err != nil {
			continue // the spy could not read: no evidence either way
		}
		if !s.exists || s.value != h.value || s.pttl <= 0 {
			if _, seen := w.bad[h]; !seen {
				w.bad[h] = fmt.Sprintf("%s at %+.3fs", s, now.Sub(w.since).Seconds())
			}
			continue
		}
		if l := w.least[h]; l < 0 || s.pttl < l {
			w.least[h] = s.pttl
		}
	}
}

// run samples every sample for d, or until stop returns true.
func (w *keyWatch) run(d time.Duration, stop func() bool) {
	end := time.Now().Add(d)
	for time.Now().Before(end) && (stop == nil || !stop()) {
		w.sampleOnce()
		time.Sleep(sample)
	}
}

// lostOnServer lists the locks whose key was once found without the
// holder's value.
func (w *keyWatch) lostOnServer() []*held {
	var out []*held
	for _, h := range w.hs {
		if _, ok := w.bad[h]; ok {
			out = append(out, h)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Contexts handed out by wd.Context.

// doneWatch records when a context ended.
type doneWatch struct {
	ctx  context.Context
	done chan struct{}
	at   time.Time // valid once done is closed
}

// watchDone starts recording when ctx ends; the goroutine ends with ctx
// (every test cancels its contexts).
func watchDone(ctx context.Context) *doneWatch {
	w := &doneWatch{ctx: ctx, done: make(chan struct{})}
	go func() {
		<-ctx.Done()
		w.at = time.Now()
		close(w.done)
	}()
	return w
}

// wait returns when the context ended, or zero if it did not within d.
func (w *doneWatch) wait(d time.Duration) time.Time {
	select {
	case <-w.done:
		return w.at
	case <-time.After(d):
		return time.Time{}
	}
}

// ended reports whether the context has ended.
func (w *doneWatch) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
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

// of returns the reports of the lock h: its key held with its value.
func (l *lostLog) of(h *held) []lostEvent {
	var out []lostEvent
	for _, ev := range l.all() {
		if ev.lock.Key == h.key && ev.lock.Value == h.value {
			out = append(out, ev)
		}
	}
	return out
}

// waitOf waits until h has been reported, or d has passed.
func (l *lostLog) waitOf(h *held, d time.Duration) []lostEvent {
	deadline := time.Now().Add(d)
	for {
		if evs := l.of(h); len(evs) > 0 || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// describe lists the first reports (at most 10), relative to since.
func (l *lostLog) describe(since time.Time) string {
	const most = 10
	evs := l.all()
	if len(evs) == 0 {
		return "no OnLost call"
	}
	var parts []string
	for i, ev := range evs {
		if i == most {
			parts = append(parts, fmt.Sprintf("... and %d more", len(evs)-most))
			break
		}
		parts = append(parts, fmt.Sprintf("[%+.3fs %s value %s: %v]", ev.at.Sub(since).Seconds(), ev.lock.Key, short(ev.lock.Value), ev.err))
	}
	return fmt.Sprintf("%d OnLost calls: %s", len(evs), strings.Join(parts, " "))
}

// ---------------------------------------------------------------------------
// Errors and output.

// reasonName names the watchdog sentinels err matches.
func reasonName(err error) string {
	if err == nil {
		return "nil"
	}
	var names []string
	for _, r := range []struct {
		name string
		err  error
	}{
		{"ErrLost", watchdog.ErrLost},
		{"ErrLockGone", watchdog.ErrLockGone},
		{"ErrLockTaken", watchdog.ErrLockTaken},
		{"ErrQuorumLost", watchdog.ErrQuorumLost},
		{"ErrUnreachable", watchdog.ErrUnreachable},
		{"ErrMaxHold", watchdog.ErrMaxHold},
		{"ErrReleased", watchdog.ErrReleased},
		{"ErrStopped", watchdog.ErrStopped},
		{"ErrNotTracked", watchdog.ErrNotTracked},
	} {
		if errors.Is(err, r.err) {
			names = append(names, r.name)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("%q (no watchdog sentinel)", err)
	}
	return fmt.Sprintf("%q (matches %s)", err, strings.Join(names, ", "))
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
