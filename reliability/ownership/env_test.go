package ownership_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/watchdog"
)

// sample is how often the scenarios look at the keys.
const sample = 25 * time.Millisecond

// stopWait bounds how long a test's cleanup waits for wd.Stop; a Stop that
// takes longer is reported, and the test goes on (its goroutine is left).
const stopWait = 5 * time.Second

// ---------------------------------------------------------------------------
// The application: a registry watching its clients, a watchdog attached.

// app is the README's start-up contract (harness.App), with the scenarios'
// own checks of the application's calls (see callbacks_test.go).
type app struct{ *harness.App }

// newApp watches clients and attaches a watchdog with opts; its Stop is
// waited for stopWait at most, and a failed test shows the last 40 lines of
// its log.
func newApp(t testing.TB, clients []redis.UniversalClient, opts ...watchdog.Option) *app {
	t.Helper()
	return &app{harness.NewApp(t, clients, harness.Config{Options: opts, StopWithin: stopWait, LogTail: 40})}
}

// tryObtain obtains key for ttl through the library named lib on c within
// 3 s, once.
func tryObtain(lib string, c redis.UniversalClient, key string, ttl time.Duration) (*harness.Held, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return harness.Obtain(ctx, lib, c, key, ttl)
}

// ---------------------------------------------------------------------------
// Looking at the keys from outside, through clients that are never watched
// (harness.NewSpy).

// keyWatch samples locks' keys and remembers, for each, the first sample
// that did not find the holder's value, and the least PTTL seen.
type keyWatch struct {
	spy   *redis.Client
	since time.Time
	hs    []*harness.Held
	least map[*harness.Held]time.Duration
	bad   map[*harness.Held]string // the first sample without the holder's value
}

func newKeyWatch(spy *redis.Client, since time.Time, hs ...*harness.Held) *keyWatch {
	w := &keyWatch{spy: spy, since: since, hs: hs, least: map[*harness.Held]time.Duration{}, bad: map[*harness.Held]string{}}
	for _, h := range hs {
		w.least[h] = -1
	}
	return w
}

func (w *keyWatch) sampleOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := harness.ReadKeys(ctx, w.spy, harness.KeysOf(w.hs), harness.Pipelined)
	now := time.Now()
	for _, h := range w.hs {
		s := st[h.Key]
		if s.Err != nil {
			continue // the spy could not read: no evidence either way
		}
		if !s.Exists || s.Value != h.Value || s.PTTL <= 0 {
			if _, seen := w.bad[h]; !seen {
				w.bad[h] = fmt.Sprintf("%s at %+.3fs", s, now.Sub(w.since).Seconds())
			}
			continue
		}
		if l := w.least[h]; l < 0 || s.PTTL < l {
			w.least[h] = s.PTTL
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
// Errors.

// reasonName names the watchdog sentinels err matches.
func reasonName(err error) string {
	if err == nil {
		return "nil"
	}
	names := harness.Matching(err, harness.WatchdogSentinels...)
	if len(names) == 0 {
		return fmt.Sprintf("%q (no watchdog sentinel)", err)
	}
	return fmt.Sprintf("%q (matches %s)", err, strings.Join(names, ", "))
}

// describeLost lists the first OnLost calls (at most 10), relative to
// since.
func (a *app) describeLost(since time.Time) string {
	return harness.DescribeLost(a.Lost.All(), since, 10)
}
