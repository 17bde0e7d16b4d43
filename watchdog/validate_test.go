package watchdog_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// This file checks that Attach validates every option and its other input:
// bad values are refused with an error naming what was wrong, nothing
// panics, and a refused Attach leaves the registry free for the next one.

// validateAdapter treats every successful "SET key value PX|EX n NX" (as
// go-redis's SetNX sends it) as an obtain; its probe returns probeErr, or panics when panics is set.
type validateAdapter struct {
	probeErr error
	panics   bool
}

func (validateAdapter) Name() string { return "validate" }

func (a validateAdapter) Probe(context.Context) error {
	if a.panics {
		panic("validateAdapter: probe panics on purpose")
	}
	return a.probeErr
}

func (validateAdapter) Classify(c registry.Command) registry.Action {
	if c.Name != "set" || len(c.Args) != 6 || c.Err != nil {
		return registry.Action{}
	}
	key, _ := c.Args[1].(string)
	val, _ := c.Args[2].(string)
	unit := map[any]time.Duration{"px": time.Millisecond, "ex": time.Second}[c.Args[3]]
	n, _ := c.Args[4].(int64)
	if unit == 0 || n <= 0 || c.Args[5] != "nx" {
		return registry.Action{}
	}
	return registry.Action{Op: registry.OpObtain, Key: key, Value: val, TTL: time.Duration(n) * unit}
}

func TestValidateOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []watchdog.Option
		want []string // what the error must mention
	}{
		{"empty schedule", opts(watchdog.WithSchedule("")), []string{"WithSchedule", `""`}},
		{"blank schedule", opts(watchdog.WithSchedule("   ")), []string{"WithSchedule"}},
		{"garbage schedule", opts(watchdog.WithSchedule("every now and then")), []string{"WithSchedule", "every now and then"}},
		{"four fields", opts(watchdog.WithSchedule("* * * *")), []string{"WithSchedule", "* * * *"}},
		{"seven fields", opts(watchdog.WithSchedule("* * * * * * *")), []string{"WithSchedule"}},
		{"one field", opts(watchdog.WithSchedule("*")), []string{"WithSchedule"}},
		{"minute out of range", opts(watchdog.WithSchedule("61 * * * *")), []string{"WithSchedule", "61"}},
		{"seconds out of range", opts(watchdog.WithSchedule("70 * * * * *")), []string{"WithSchedule", "70"}},
		{"unknown descriptor", opts(watchdog.WithSchedule("@fortnightly")), []string{"WithSchedule", "@fortnightly"}},
		{"every without interval", opts(watchdog.WithSchedule("@every")), []string{"WithSchedule"}},
		{"every with garbage", opts(watchdog.WithSchedule("@every soon")), []string{"WithSchedule"}},
		{"unknown time zone", opts(watchdog.WithSchedule("CRON_TZ=Nowhere/Bogus * * * * *")), []string{"WithSchedule"}},
		{"negative max hold", opts(watchdog.WithMaxHold(-time.Nanosecond)), []string{"WithMaxHold", "-1ns"}},
		{"very negative max hold", opts(watchdog.WithMaxHold(math.MinInt64)), []string{"WithMaxHold"}},
		{"nil logger", opts(watchdog.WithLogger(nil)), []string{"WithLogger", "nil"}},
		{"chunk size 0", opts(watchdog.WithChunkSize(0)), []string{"WithChunkSize", "(0)"}},
		{"chunk size -1", opts(watchdog.WithChunkSize(-1)), []string{"WithChunkSize", "(-1)"}},
		{"chunk size above 10000", opts(watchdog.WithChunkSize(10001)), []string{"WithChunkSize", "10001"}},
		{"chunk size MaxInt", opts(watchdog.WithChunkSize(math.MaxInt)), []string{"WithChunkSize"}},
		{"chunk size MinInt", opts(watchdog.WithChunkSize(math.MinInt)), []string{"WithChunkSize"}},
		{"negative timeout", opts(watchdog.WithTimeout(-time.Millisecond)), []string{"WithTimeout", "-1ms"}},
		{"very negative timeout", opts(watchdog.WithTimeout(math.MinInt64)), []string{"WithTimeout"}},
		{"schedule that never fires (February 30th)", opts(watchdog.WithSchedule("0 0 30 2 *")), []string{"WithSchedule", "0 0 30 2 *", "within a year"}},
		{"schedule that never fires (April 31st)", opts(watchdog.WithSchedule("0 0 0 31 4 *")), []string{"WithSchedule", "within a year"}},
		{"max hold 60ns (a unit mistake)", opts(watchdog.WithMaxHold(60)), []string{"WithMaxHold", "60ns", "at least 1s"}},
		{"max hold 1ns", opts(watchdog.WithMaxHold(time.Nanosecond)), []string{"WithMaxHold", "1ns"}},
		{"max hold just below 1s", opts(watchdog.WithMaxHold(time.Second - time.Nanosecond)), []string{"WithMaxHold"}},
		{"timeout 1µs", opts(watchdog.WithTimeout(time.Microsecond)), []string{"WithTimeout", "1µs", "between 1ms"}},
		{"timeout above a minute", opts(watchdog.WithTimeout(time.Minute + time.Nanosecond)), []string{"WithTimeout"}},
		{"timeout MaxInt64", opts(watchdog.WithTimeout(math.MaxInt64)), []string{"WithTimeout"}},
		{"negative stop timeout", opts(watchdog.WithStopTimeout(-time.Second)), []string{"WithStopTimeout", "-1s"}},
		{"nil option", []watchdog.Option{nil}, []string{"option 0", "nil"}},
		{"nil option among good ones", opts(watchdog.WithSchedule("@every 1h"), watchdog.WithChunkSize(10), nil), []string{"option 2", "nil"}},
		// The first bad option is the one reported.
		{"two bad options", opts(watchdog.WithTimeout(-1), watchdog.WithChunkSize(0)), []string{"WithTimeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.New(validateAdapter{})
			wd, err := attachNoPanic(t, reg, tc.opts...)
			if err == nil {
				wd.Stop()
				t.Fatalf("Attach(%s) = nil error, want one naming %q", tc.name, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Attach(%s) = %q, want the error to name %q", tc.name, err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "watchdog: ") {
				t.Errorf("Attach(%s) = %q, want the package prefix", tc.name, err)
			}
			for _, sentinel := range []error{watchdog.ErrAttached, watchdog.ErrNilRegistry, watchdog.ErrNoAdapters, registry.ErrUpstreamChanged} {
				if errors.Is(err, sentinel) {
					t.Errorf("Attach(%s) = %v, which matches %v: want an option error", tc.name, err, sentinel)
				}
			}
			// A refused Attach leaves the registry free.
			wd, err = attachNoPanic(t, reg, watchdog.WithSchedule("@every 1h"))
			if err != nil {
				t.Fatalf("Attach after a refused Attach = %v, want nil", err)
			}
			wd.Stop()
		})
	}
}

// TestValidateGoodEdgeValues checks the values at the edges of what each
// option accepts: they are accepted, and the watchdog starts and stops.
func TestValidateGoodEdgeValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []watchdog.Option
	}{
		{"five fields", opts(watchdog.WithSchedule("*/5 * * * *"))},
		{"six fields with seconds", opts(watchdog.WithSchedule("*/2 * * * * *"))},
		{"descriptor", opts(watchdog.WithSchedule("@hourly"))},
		{"every", opts(watchdog.WithSchedule("@every 2s"))},
		{"time zone", opts(watchdog.WithSchedule("CRON_TZ=UTC 0 * * * *"))},
		{"max hold 0 (no bound)", opts(watchdog.WithMaxHold(0))},
		{"max hold 1s", opts(watchdog.WithMaxHold(time.Second))},
		{"max hold MaxInt64", opts(watchdog.WithMaxHold(math.MaxInt64))},
		{"chunk size 1", opts(watchdog.WithChunkSize(1))},
		{"chunk size 10000", opts(watchdog.WithChunkSize(10000))},
		{"timeout 0 (derived)", opts(watchdog.WithTimeout(0))},
		{"timeout 1ms", opts(watchdog.WithTimeout(time.Millisecond))},
		{"timeout 1m", opts(watchdog.WithTimeout(time.Minute))},
		{"stop timeout 0 (no wait)", opts(watchdog.WithStopTimeout(0))},
		{"yearly schedule", opts(watchdog.WithSchedule("@yearly"))},
		{"a logger", opts(watchdog.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))},
		{"nil OnLost (does nothing)", opts(watchdog.WithOnLost(nil))},
		{"nil filter (renews all)", opts(watchdog.WithFilter(nil))},
		{"no options", nil},
		{"the same option twice (the last wins)", opts(watchdog.WithChunkSize(5), watchdog.WithChunkSize(7))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd, err := attachNoPanic(t, registry.New(validateAdapter{}), tc.opts...)
			if err != nil {
				t.Fatalf("Attach(%s) = %v, want nil", tc.name, err)
			}
			if err := wd.Sweep(context.Background()); err != nil {
				t.Errorf("Sweep() with nothing tracked = %v, want nil", err)
			}
			wd.Stop()
		})
	}
}

func TestValidateRegistry(t *testing.T) {
	changed := &registry.UpstreamChangedError{Library: "example.com/locks", Version: "v0.0.1",
		Scripts: []registry.Script{{Use: "obtain", SHA1: "00112233445566778899aabbccddeeff00112233"}}}
	for _, tc := range []struct {
		name     string
		reg      *registry.Registry
		sentinel error
		want     []string
	}{
		{"nil registry", nil, watchdog.ErrNilRegistry, []string{"nil registry"}},
		{"no adapters", registry.New(), watchdog.ErrNoAdapters, []string{"no adapters"}},
		{"only nil adapters", registry.New(nil, nil), watchdog.ErrNoAdapters, []string{"no adapters"}},
		{"changed upstream", registry.New(validateAdapter{probeErr: changed}), registry.ErrUpstreamChanged, []string{"validate", "example.com/locks", "obtain"}},
		{"probe fails", registry.New(validateAdapter{probeErr: errors.New("probe broke")}), nil, []string{"validate", "probe broke"}},
		{"probe panics", registry.New(validateAdapter{panics: true}), nil, []string{"validate", "panicked", "on purpose"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd, err := attachNoPanic(t, tc.reg)
			if err == nil {
				wd.Stop()
				t.Fatalf("Attach(%s) = nil error, want one", tc.name)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("Attach(%s) = %v, want errors.Is(_, %v)", tc.name, err, tc.sentinel)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Attach(%s) = %q, want the error to name %q", tc.name, err, w)
				}
			}
		})
	}
}

func TestValidateSecondAttach(t *testing.T) {
	reg := registry.New(validateAdapter{})
	first, err := attachNoPanic(t, reg, watchdog.WithSchedule("@every 1h"))
	if err != nil {
		t.Fatalf("first Attach = %v, want nil", err)
	}
	// Refused while the first runs, with good and with bad options alike:
	// a bad option is reported before the registry is looked at.
	if wd, err := attachNoPanic(t, reg); !errors.Is(err, watchdog.ErrAttached) || !strings.Contains(err.Error(), "already") {
		if wd != nil {
			wd.Stop()
		}
		t.Errorf("second Attach = %v, want ErrAttached", err)
	}
	if wd, err := attachNoPanic(t, reg, watchdog.WithChunkSize(0)); err == nil || errors.Is(err, watchdog.ErrAttached) || !strings.Contains(err.Error(), "WithChunkSize") {
		if wd != nil {
			wd.Stop()
		}
		t.Errorf("second Attach with a bad option = %v, want the option's error", err)
	}
	// Another registry is not affected.
	other, err := attachNoPanic(t, registry.New(validateAdapter{}))
	if err != nil {
		t.Fatalf("Attach of another registry = %v, want nil", err)
	}
	other.Stop()
	first.Stop()
	if err := first.Sweep(context.Background()); !errors.Is(err, watchdog.ErrStopped) {
		t.Errorf("Sweep after Stop = %v, want ErrStopped", err)
	}
	again, err := attachNoPanic(t, reg)
	if err != nil {
		t.Fatalf("Attach after Stop = %v, want nil", err)
	}
	again.Stop()
}

// TestValidateNilCallbacks checks what a nil OnLost and a nil filter do when
// they would be called: a nil OnLost reports nothing (the loss is still
// counted and the lock untracked), a nil filter renews every lock.
func TestValidateNilCallbacks(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(context.Context, string, string) (net.Conn, error) { return m.Dial() },
	})
	defer rdb.Close()
	reg := registry.New(validateAdapter{})
	if err := reg.Watch(rdb); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wd, err := attachNoPanic(t, reg, watchdog.WithSchedule("@every 1h"), watchdog.WithOnLost(nil), watchdog.WithFilter(nil))
	if err != nil {
		t.Fatalf("Attach(nil OnLost, nil filter) = %v, want nil", err)
	}
	defer wd.Stop()
	for _, key := range []string{"kept", "lost"} {
		if ok, err := rdb.SetNX(ctx, key, "v-"+key, 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("SET %s NX = %v, %v", key, ok, err)
		}
	}
	if n := reg.Len(); n != 2 {
		t.Fatalf("tracked = %d, want 2", n)
	}
	m.Del("lost")
	m.SetTTL("kept", 2*time.Second)
	sweepNoPanic(t, wd)
	if ttl := m.TTL("kept"); ttl != 10*time.Second {
		t.Errorf("TTL of kept after a sweep with a nil filter = %v, want 10s (renewed)", ttl)
	}
	if st := wd.Stats(); st.Lost != 1 {
		t.Errorf("Stats().Lost = %d, want 1", st.Lost)
	}
	if _, ok := reg.Get(rdb, "lost"); ok {
		t.Errorf("the lost lock is still tracked")
	}
	if m.Exists("lost") {
		t.Errorf("the lost lock was re-created")
	}
}

func opts(o ...watchdog.Option) []watchdog.Option { return o }

// attachNoPanic calls Attach and fails t if it panics.
func attachNoPanic(t *testing.T, reg *registry.Registry, o ...watchdog.Option) (wd *watchdog.Watchdog, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Attach panicked: %v", p)
		}
	}()
	return watchdog.Attach(reg, o...)
}

func sweepNoPanic(t *testing.T, wd *watchdog.Watchdog) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Sweep panicked: %v", p)
		}
	}()
	if err := wd.Sweep(context.Background()); err != nil {
		t.Fatalf("Sweep() = %v, want nil", err)
	}
}
