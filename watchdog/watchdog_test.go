package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setAdapter treats every "SET key value PX|EX n NX" (go-redis SetNX) as an obtain, every
// EVAL of refreshScript as a refresh, and every
// EVAL of releaseScript as a release: enough to drive the watchdog without
// an upstream library.
type setAdapter struct{ probeErr error }

const (
	releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`
	refreshScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`
)

func (setAdapter) Name() string { return "test" }

func (a setAdapter) Probe(context.Context) error { return a.probeErr }

func (setAdapter) Classify(c registry.Command) registry.Action {
	args := c.Args
	switch c.Name {
	case "set":
		if len(args) != 6 || c.Err != nil {
			return registry.Action{}
		}
		key, _ := args[1].(string)
		val, _ := args[2].(string)
		n, _ := args[4].(int64)
		unit := map[string]time.Duration{"px": time.Millisecond, "ex": time.Second}[fmt.Sprint(args[3])]
		if unit == 0 || !strings.EqualFold(fmt.Sprint(args[5]), "nx") || n <= 0 {
			return registry.Action{}
		}
		return registry.Action{Op: registry.OpObtain, Key: key, Value: val, TTL: time.Duration(n) * unit}
	case "eval":
		if src, _ := args[1].(string); src == releaseScript && len(args) == 5 {
			key, _ := args[3].(string)
			val, _ := args[4].(string)
			return registry.Action{Op: registry.OpRelease, Key: key, Value: val}
		}
		// A refresh that failed (no reply) changed nothing the holder
		// knows of, as the real adapters read it.
		if src, _ := args[1].(string); src == refreshScript && len(args) == 6 && (c.Err == nil || c.Pending) {
			key, _ := args[3].(string)
			val, _ := args[4].(string)
			ms, _ := args[5].(int64)
			if ms > 0 {
				return registry.Action{Op: registry.OpRefresh, Key: key, Value: val, TTL: time.Duration(ms) * time.Millisecond}
			}
		}
	}
	return registry.Action{}
}

// env is one synctest scenario: a miniredis with TTLs on the bubble's clock,
// a watched client, and an unwatched one for looking from outside.
type env struct {
	m        *miniredis.Miniredis
	rdb      *redis.Client // watched
	observer *redis.Client // not watched
	reg      *registry.Registry
}

func newEnv(t *testing.T) *env { return newEnvDialing(t, nil) }

// dialer is a go-redis Options.Dialer.
type dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// newEnvDialing is newEnv whose watched client dials through wrap (the
// in-memory dialer when wrap is nil).
func newEnvDialing(t *testing.T, wrap func(dialer) dialer) *env {
	t.Helper()
	return newEnvOptions(t, func(o *redis.Options) {
		if wrap != nil {
			o.Dialer = wrap(o.Dialer)
		}
	})
}

// newEnvOptions is newEnv whose watched client's options set changes
// (its Dialer is the in-memory dialer when set is called).
func newEnvOptions(t *testing.T, set func(*redis.Options)) *env {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	dial := memconn.Dialer(m)
	o := &redis.Options{Addr: memconn.Addr, Dialer: dial, MaxRetries: -1}
	set(o)
	e := &env{
		m:        m,
		rdb:      redis.NewClient(o),
		observer: redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: dial}),
		reg:      registry.New(setAdapter{}),
	}
	if err := e.reg.Watch(e.rdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.rdb.Close()
		_ = e.observer.Close()
		m.Close()
	})
	return e
}

func (e *env) obtain(t *testing.T, key, val string, ttl time.Duration) {
	t.Helper()
	ok, err := e.rdb.SetNX(context.Background(), key, val, ttl).Result()
	if err != nil || !ok {
		t.Fatalf("SET %s NX = %v, %v, want true, nil", key, ok, err)
	}
}

// refresh sets key's TTL to ttl, as its holder's refresh does.
func (e *env) refresh(t *testing.T, key, val string, ttl time.Duration) {
	t.Helper()
	n, err := e.rdb.Eval(context.Background(), refreshScript, []string{key}, val, ttl.Milliseconds()).Int()
	if err != nil || n != 1 {
		t.Fatalf("refresh %s: %v, %v, want 1, nil", key, n, err)
	}
}

func (e *env) release(t *testing.T, key, val string) {
	t.Helper()
	if err := e.rdb.Eval(context.Background(), releaseScript, []string{key}, val).Err(); err != nil {
		t.Fatalf("release %s: %v", key, err)
	}
}

// releaseQuiet releases a lock from a goroutine that may not fail a test.
func (e *env) releaseQuiet(key, val string) {
	_ = e.rdb.Eval(context.Background(), releaseScript, []string{key}, val).Err()
}

func (e *env) pttl(key string) time.Duration {
	return e.observer.PTTL(context.Background(), key).Val()
}

type lossLog struct {
	mu   sync.Mutex
	keys []string
	errs []error
}

func (l *lossLog) onLost(lk registry.Lock, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, lk.Key)
	l.errs = append(l.errs, err)
}

func (l *lossLog) get() ([]string, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...), append([]error(nil), l.errs...)
}

func attach(t *testing.T, reg *registry.Registry, opts ...watchdog.Option) *watchdog.Watchdog {
	t.Helper()
	wd, err := watchdog.Attach(reg, opts...)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(wd.Stop)
	return wd
}

// I2: a lock's remaining TTL never drops below a third, for short TTLs under
// a long schedule (fast lane) and long TTLs under the default one (ticks).
func TestHoldsAboveAThird(t *testing.T) {
	for _, tc := range []struct {
		ttl      time.Duration
		schedule string
		hold     time.Duration
		step     time.Duration
	}{
		{50 * time.Millisecond, watchdog.DefaultSchedule, time.Minute, 5 * time.Millisecond},
		{100 * time.Millisecond, watchdog.DefaultSchedule, 10 * time.Minute, 10 * time.Millisecond},
		{8 * time.Second, watchdog.DefaultSchedule, 5 * time.Minute, 250 * time.Millisecond},
		{30 * time.Second, watchdog.DefaultSchedule, 10 * time.Minute, time.Second},
		{2 * time.Second, "*/1 * * * * *", 2 * time.Minute, 100 * time.Millisecond},
		{90 * time.Second, "@every 1m", 30 * time.Minute, 3 * time.Second},
		{30 * time.Second, "* * * * *", 10 * time.Minute, time.Second},
		{200 * time.Millisecond, "@hourly", 5 * time.Minute, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%v under %s", tc.ttl, tc.schedule), func(t *testing.T) {
			watchdog.Bubble(t, func(t *testing.T) {
				e := newEnv(t)
				wd := attach(t, e.reg, watchdog.WithSchedule(tc.schedule), watchdog.WithMaxHold(0))
				e.obtain(t, "job", "me", tc.ttl)
				lowest := tc.ttl
				for elapsed := time.Duration(0); elapsed < tc.hold; elapsed += tc.step {
					time.Sleep(tc.step)
					lowest = min(lowest, e.pttl("job"))
				}
				if lowest < tc.ttl/3 {
					t.Errorf("lowest PTTL over %v = %v, want >= %v", tc.hold, lowest, tc.ttl/3)
				}
				if s := wd.Stats(); s.Lost != 0 || s.Renewals == 0 {
					t.Errorf("Stats() = %+v, want renewals and no loss", s)
				}
				e.release(t, "job", "me")
				wd.Stop()
			})
		})
	}
}

// Without a watchdog the same lock expires: the test above can fail.
func TestWithoutWatchdogLockExpires(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.obtain(t, "job", "me", 100*time.Millisecond)
		time.Sleep(150 * time.Millisecond)
		if n := e.observer.Exists(context.Background(), "job").Val(); n != 0 {
			t.Fatalf("EXISTS job = %d after its TTL without a watchdog, want 0", n)
		}
	})
}

// I3: after a release no renewal re-creates or extends the key.
func TestReleaseStopsRenewal(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"))
		e.obtain(t, "job", "me", 300*time.Millisecond)
		time.Sleep(2 * time.Second)
		e.release(t, "job", "me")
		if got := len(e.reg.Locks()); got != 0 {
			t.Fatalf("len(Locks()) after release = %d, want 0", got)
		}
		// A renewal the release waited for is counted when its answer has
		// been read, which may be just after Release returned: count from
		// 50 ms after it.
		time.Sleep(50 * time.Millisecond)
		before := wd.Stats().Renewals
		for range 100 {
			time.Sleep(50 * time.Millisecond)
			if n := e.observer.Exists(context.Background(), "job").Val(); n != 0 {
				t.Fatalf("EXISTS job = %d after release, want 0", n)
			}
		}
		if after := wd.Stats().Renewals; after != before {
			t.Errorf("renewals after release = %d, want %d", after, before)
		}
	})
}

// I5 and I1: a deleted or stolen lock is reported within one period, is not
// re-created, and the intruder's value and TTL are untouched.
func TestLossReported(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var lost lossLog
		attach(t, e.reg, watchdog.WithSchedule("@every 1s"), watchdog.WithOnLost(lost.onLost))
		e.obtain(t, "deleted", "me", 5*time.Second)
		e.obtain(t, "stolen", "me", 5*time.Second)
		time.Sleep(1500 * time.Millisecond)
		ctx := context.Background()
		e.observer.Del(ctx, "deleted")
		e.observer.Set(ctx, "stolen", "intruder", 7*time.Second)
		time.Sleep(1100 * time.Millisecond)
		keys, errs := lost.get()
		want := map[string]error{"deleted": watchdog.ErrLockGone, "stolen": watchdog.ErrLockTaken}
		if len(keys) != 2 {
			t.Fatalf("OnLost calls = %v, want one for each of %v", keys, want)
		}
		for i, k := range keys {
			if !errors.Is(errs[i], want[k]) || !errors.Is(errs[i], watchdog.ErrLost) {
				t.Errorf("OnLost(%s) reason = %v, want %v (and ErrLost)", k, errs[i], want[k])
			}
		}
		if got := len(e.reg.Locks()); got != 0 {
			t.Errorf("len(Locks()) = %d, want 0", got)
		}
		time.Sleep(3 * time.Second)
		if n := e.observer.Exists(ctx, "deleted").Val(); n != 0 {
			t.Errorf("EXISTS deleted = %d, want 0: re-created", n)
		}
		if v := e.observer.Get(ctx, "stolen").Val(); v != "intruder" {
			t.Errorf("GET stolen = %q, want intruder", v)
		}
		if ttl := e.pttl("stolen"); ttl > 4*time.Second {
			t.Errorf("PTTL stolen = %v, want <= 4s (7s set 3s ago, untouched)", ttl)
		}
	})
}

// I6: no renewal past max hold; the lock expires within its TTL after.
func TestMaxHold(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var lost lossLog
		attach(t, e.reg, watchdog.WithSchedule("@every 1s"), watchdog.WithMaxHold(3*time.Second), watchdog.WithOnLost(lost.onLost))
		e.obtain(t, "job", "me", 600*time.Millisecond)
		time.Sleep(2900 * time.Millisecond)
		if e.pttl("job") <= 0 {
			t.Fatal("lock expired before max hold")
		}
		time.Sleep(800 * time.Millisecond)
		if n := e.observer.Exists(context.Background(), "job").Val(); n != 0 {
			t.Errorf("EXISTS job = %d at max hold + TTL, want 0", n)
		}
		keys, errs := lost.get()
		if len(keys) != 1 || !errors.Is(errs[0], watchdog.ErrMaxHold) {
			t.Errorf("OnLost = %v %v, want job with ErrMaxHold", keys, errs)
		}
	})
}

// Renewal errors are retried; a lock whose TTL passes while Redis answers
// only errors is reported as unreachable and never re-created; the others
// resume renewal when Redis answers again.
func TestUnreachable(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var lost lossLog
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"), watchdog.WithOnLost(lost.onLost))
		e.obtain(t, "short", "me", 300*time.Millisecond)
		e.obtain(t, "long", "me", 5*time.Second)
		time.Sleep(time.Second)
		e.m.SetError("LOADING Redis is loading the dataset in memory")
		time.Sleep(900 * time.Millisecond)
		e.m.SetError("")
		keys, errs := lost.get()
		if len(keys) != 1 || keys[0] != "short" || !errors.Is(errs[0], watchdog.ErrUnreachable) {
			t.Fatalf("OnLost = %v %v, want short with ErrUnreachable", keys, errs)
		}
		if wd.Stats().Failures == 0 {
			t.Error("Stats().Failures = 0, want failures counted")
		}
		time.Sleep(10 * time.Second)
		if n := e.observer.Exists(context.Background(), "short").Val(); n != 0 {
			t.Errorf("EXISTS short = %d, want 0", n)
		}
		if ttl := e.pttl("long"); ttl < 5*time.Second/3 {
			t.Errorf("PTTL long = %v after the outage, want renewal resumed (>= %v)", ttl, 5*time.Second/3)
		}
	})
}

// skipFilter refuses the locks whose key starts with "skip:".
func skipFilter() watchdog.Option {
	return watchdog.WithFilter(func(l registry.Lock) bool { return !strings.HasPrefix(l.Key, "skip:") })
}

func TestFilter(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		attach(t, e.reg, watchdog.WithSchedule("@every 1s"),
			skipFilter())
		e.obtain(t, "keep", "me", 500*time.Millisecond)
		e.obtain(t, "skip:me", "me", 500*time.Millisecond)
		time.Sleep(3 * time.Second)
		ctx := context.Background()
		if n := e.observer.Exists(ctx, "keep", "skip:me").Val(); n != 1 {
			t.Errorf("EXISTS keep skip:me = %d, want 1 (only keep renewed)", n)
		}
	})
}

// The filter holds for locks tracked before Attach too: a short lock the
// filter refuses does not take the fast lane when the watchdog adopts the
// client.
func TestFilterOfLocksTrackedBeforeAttach(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.obtain(t, "keep", "me", 600*time.Millisecond)
		e.obtain(t, "skip:me", "me", 600*time.Millisecond)
		attach(t, e.reg, // ticks every 10 s: both locks need the fast lane
			skipFilter())
		time.Sleep(3 * time.Second)
		ctx := context.Background()
		if !e.m.Exists("keep") {
			t.Errorf("keep expired: the fast lane did not renew it")
		}
		if e.m.Exists("skip:me") {
			t.Errorf("skip:me still exists after 3 s: the fast lane renewed a lock the filter refuses (PTTL %v)", e.observer.PTTL(ctx, "skip:me").Val())
		}
	})
}

// The filter holds for the retries of an endpoint that failed too: when a
// sweep finds the endpoint down and queues its locks for a retry, a lock
// the filter refuses is not among them.
func TestFilterOfRetries(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		attach(t, e.reg, watchdog.WithSchedule("@every 1s"),
			skipFilter())
		e.obtain(t, "keep", "me", 4*time.Second)
		e.obtain(t, "skip:me", "me", 4*time.Second)
		time.Sleep(1100 * time.Millisecond) // the 1 s tick renewed keep
		e.m.SetError("LOADING Redis is loading the dataset in memory")
		time.Sleep(2100 * time.Millisecond) // the 2 s tick failed; the 3 s one queued the endpoint's locks for a retry
		e.m.SetError("")
		time.Sleep(1300 * time.Millisecond) // the retries went through; skip:me's 4 s are over
		if !e.m.Exists("keep") {
			t.Errorf("keep expired: it was not renewed after the outage")
		}
		if e.m.Exists("skip:me") {
			t.Errorf("skip:me still exists 4.5 s after a 4 s obtain: a retry renewed a lock the filter refuses (PTTL %v)", e.observer.PTTL(context.Background(), "skip:me").Val())
		}
	})
}

// Sweep renews many locks in chunked calls, and Stats counts them.
func TestSweepManyLocks(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1h"), watchdog.WithChunkSize(7))
		const n = 1000
		for i := range n {
			e.obtain(t, fmt.Sprintf("k%d", i), "v", time.Hour)
		}
		time.Sleep(time.Minute)
		if err := wd.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := wd.Stats().Renewals; got != n {
			t.Errorf("Renewals after one sweep = %d, want %d", got, n)
		}
		for _, l := range e.reg.Locks() {
			if l.Renewals != 1 {
				t.Fatalf("lock %s renewals = %d, want 1", l.Key, l.Renewals)
			}
		}
		if ttl := e.pttl("k999"); ttl < 59*time.Minute {
			t.Errorf("PTTL k999 = %v after sweep, want ~1h", ttl)
		}
		wd.Stop()
		if err := wd.Sweep(context.Background()); !errors.Is(err, watchdog.ErrStopped) {
			t.Errorf("Sweep after Stop = %v, want ErrStopped", err)
		}
	})
}

// A server whose script cache was flushed gets the source again.
func TestScriptFlushed(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1h"))
		e.obtain(t, "job", "me", time.Minute)
		ctx := context.Background()
		for range 2 {
			e.observer.ScriptFlush(ctx)
			if err := wd.Sweep(ctx); err != nil {
				t.Fatalf("Sweep after SCRIPT FLUSH: %v", err)
			}
		}
		if got := wd.Stats().Renewals; got != 2 {
			t.Errorf("Renewals = %d, want 2", got)
		}
	})
}

func TestAttachValidates(t *testing.T) {
	reg := registry.New(setAdapter{})
	for _, tc := range []struct {
		name string
		reg  *registry.Registry
		opts []watchdog.Option
		want string
	}{
		{"nil registry", nil, nil, "nil registry"},
		{"no adapters", registry.New(), nil, "no adapters"},
		{"bad schedule", reg, []watchdog.Option{watchdog.WithSchedule("every now and then")}, "WithSchedule"},
		{"empty schedule", reg, []watchdog.Option{watchdog.WithSchedule("")}, "WithSchedule"},
		{"negative max hold", reg, []watchdog.Option{watchdog.WithMaxHold(-time.Second)}, "WithMaxHold"},
		{"nil logger", reg, []watchdog.Option{watchdog.WithLogger(nil)}, "WithLogger"},
		{"chunk size 0", reg, []watchdog.Option{watchdog.WithChunkSize(0)}, "WithChunkSize"},
		{"negative timeout", reg, []watchdog.Option{watchdog.WithTimeout(-1)}, "WithTimeout"},
		{"nil option", reg, []watchdog.Option{nil}, "nil"},
		{"17 adapters", registry.New(slices.Repeat([]registry.Adapter{setAdapter{}}, 17)...), nil, "at most 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd, err := watchdog.Attach(tc.reg, tc.opts...)
			if err == nil {
				wd.Stop()
				t.Fatalf("Attach = nil error, want one mentioning %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Attach error = %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

// I7: Attach refuses when a probe finds unpinned scripts, naming them.
func TestAttachRefusesChangedUpstream(t *testing.T) {
	changed := &registry.UpstreamChangedError{
		Library: "example.com/locks", Version: "v9.9.9",
		Scripts: []registry.Script{{Use: "release", SHA1: "0123456789abcdef0123456789abcdef01234567"}},
	}
	wd, err := watchdog.Attach(registry.New(setAdapter{probeErr: changed}))
	if err == nil {
		wd.Stop()
		t.Fatal("Attach = nil error, want ErrUpstreamChanged")
	}
	if !errors.Is(err, registry.ErrUpstreamChanged) {
		t.Errorf("errors.Is(%v, ErrUpstreamChanged) = false, want true", err)
	}
	for _, want := range []string{"example.com/locks", "v9.9.9", "release", "0123456789abcdef"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Attach error %q does not name %q", err, want)
		}
	}
}

func TestAttachStopAttach(t *testing.T) {
	reg := registry.New(setAdapter{})
	wd := attach(t, reg)
	if _, err := watchdog.Attach(reg); !errors.Is(err, watchdog.ErrAttached) {
		t.Fatalf("second Attach = %v, want ErrAttached", err)
	}
	wd.Stop()
	wd.Stop()
	wd2 := attach(t, reg)
	wd2.Stop()
}
