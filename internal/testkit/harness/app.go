package harness

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// App is the start-up contract of the README as a test holds it: one
// registry with both adapters watching the application's clients, and one
// watchdog attached with an OnLost that records every call and a logger
// whose output is shown when the test fails. Its fields are set by
// [Attach] and not changed after.
type App struct {
	T    testing.TB // the test the App belongs to
	Reg  *registry.Registry
	WD   *watchdog.Watchdog
	Lost *LostLog        // every OnLost call, recorded before Config.OnLost runs
	Logs *LockedBuffer   // the watchdog's log, Debug and above in real time (Info simulated)
	Lag  *lagmeter.Meter // this process's scheduling lag; nil (none) in a bubble
}

// Config is what a test changes in an [App]; the zero value is the
// README's defaults in real time.
type Config struct {
	// Options are passed to watchdog.Attach after the App's own OnLost and
	// logger (an OnLost among them replaces the App's: Lost stays empty).
	Options []watchdog.Option
	// OnLost, if not nil, runs in OnLost after the call is recorded (a
	// slow callback, a record of the test's own).
	OnLost func(registry.Lock, error)
	// StopWithin bounds how long the cleanup waits for Stop: a Stop that
	// takes longer fails the test (its goroutine is left). 0: Stop is
	// waited for, and only logged when it takes over a second.
	StopWithin time.Duration
	// LogTail is how many of the watchdog's log lines a failed test
	// shows, the first half and the last; 0 shows the whole log.
	LogTail int
	// Lag is the meter of the App; nil starts one, unless Simulated.
	Lag *lagmeter.Meter
	// Simulated is set for an App inside a testing/synctest bubble: no lag
	// meter (App.Lag is nil and measures nothing).
	Simulated bool
}

// Watch returns a registry with both adapters that watches clients; it
// fails t if one cannot be watched.
func Watch[C redis.UniversalClient](t testing.TB, clients ...C) *registry.Registry {
	t.Helper()
	reg := registry.New(bsmredislock.New(), goredsync.New())
	for _, c := range clients {
		if err := reg.Watch(c); err != nil {
			t.Fatalf("reg.Watch(%T): got %v, want nil", c, err)
		}
	}
	return reg
}

// NewApp watches clients and attaches a watchdog: [Watch], then [Attach].
func NewApp[C redis.UniversalClient](t testing.TB, clients []C, c Config) *App {
	t.Helper()
	return Attach(t, Watch(t, clients...), c)
}

// Attach attaches a watchdog to reg as c says, or fails t. The watchdog is
// stopped in t.Cleanup.
func Attach(t testing.TB, reg *registry.Registry, c Config) *App {
	t.Helper()
	a := &App{T: t, Reg: reg, Lost: &LostLog{}, Logs: &LockedBuffer{}, Lag: c.Lag}
	if a.Lag == nil && !c.Simulated {
		a.Lag = lagmeter.Start(t)
	}
	// In real time, Debug: a failure shows every renew call's round trip
	// (when it was answered, how long after it was sent), which tells a
	// call sent late from one answered late. Simulated hours stay at Info.
	level := slog.LevelDebug
	if c.Simulated {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(a.Logs, &slog.HandlerOptions{Level: level}))
	onLost := func(l registry.Lock, err error) {
		a.Lost.Record(l, err)
		if c.OnLost != nil {
			c.OnLost(l, err)
		}
	}
	opts := append([]watchdog.Option{watchdog.WithOnLost(onLost), watchdog.WithLogger(logger)}, c.Options...)
	wd, err := watchdog.Attach(reg, opts...)
	if err != nil {
		t.Fatalf("watchdog.Attach: got %v, want nil", err)
	}
	a.WD = wd
	t.Cleanup(func() { a.stop(c.StopWithin) })
	t.Cleanup(func() {
		if t.Failed() {
			tail := c.LogTail
			if tail == 0 && level == slog.LevelDebug {
				tail = 200 // a line a renew call: the first and last hundred
			}
			t.Logf("watchdog log (%v and above):\n%s", level, a.Logs.Ends(tail))
		}
	})
	return a
}

// stop stops the watchdog, bounded by within when it is not 0.
func (a *App) stop(within time.Duration) {
	start := time.Now()
	if within == 0 {
		a.WD.Stop()
	} else if !Within(within, a.WD.Stop) {
		a.T.Errorf("cleanup: wd.Stop() did not return within %v, want it to return", within)
		return
	}
	if d := time.Since(start); d > time.Second {
		a.T.Logf("cleanup: wd.Stop() took %v (renewals stuck on silent connections?)", d.Round(time.Millisecond))
	}
}

// Tracked returns the lock the registry tracks under key, on any client.
func (a *App) Tracked(key string) (registry.Lock, bool) {
	for _, l := range a.Reg.Locks() {
		if l.Key == key {
			return l, true
		}
	}
	return registry.Lock{}, false
}

// SkipShort skips t under go test -short, saying what the test costs (a
// real-time scenario of seconds, a soak): go test ./... runs them all.
func SkipShort(t testing.TB, cost string) {
	t.Helper()
	if testing.Short() {
		t.Skip(cost + "; skipped with -short")
	}
}

// Within runs fn on a goroutine of its own and reports whether it returned
// within d. A call that does not return is left running.
func Within(d time.Duration, fn func()) bool {
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
