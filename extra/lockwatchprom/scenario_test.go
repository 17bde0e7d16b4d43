package lockwatchprom_test

// This file is the same in extra/lockwatchotel and extra/lockwatchprom, but
// for the package name.

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/internal/memconn"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// Steps of the scenario at which check is called.
const (
	stepRenewing = "renewing" // three locks tracked and being renewed
	stepAgain    = "again"    // at once after stepRenewing: nothing renewed since
	stepLost     = "lost"     // one lock gone, one taken, one past its max hold
	stepIdle     = "idle"     // nothing tracked for a while: nothing renewed since stepLost
	stepEnd      = "end"      // one lost while Redis failed, one tracked and renewed
)

// scenarioTTL is the TTL of every lock of the scenario.
const scenarioTTL = 300 * time.Millisecond

// latency is the time every read from the scenario's server takes, so that
// sweeps take time on the bubble's clock.
const latency = 2 * time.Millisecond

// slowDialer returns dial with every read of its connections taking
// latency more.
func slowDialer(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowConn{c}, nil
	}
}

type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(latency)
	return c.Conn.Read(p)
}

// runScenario drives a watchdog (schedule @every 100ms, max hold 1s) on
// miniredis inside a synctest bubble (each read taking latency), with locks obtained through
// redislock on a watched client. instrument is called once one lock has
// been renewed (so that a count made before it exists); check is called at
// each step with the watchdog's Stats, when every goroutine of the bubble
// is idle, and with the simulated time since instrument.
func runScenario(t *testing.T, instrument func(*watchdog.Watchdog), check func(step string, st watchdog.Stats, elapsed time.Duration)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		t.Cleanup(m.Close)
		dial := slowDialer(memconn.Dialer(m))
		rdb := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: dial, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		reg := registry.New(bsmredislock.New())
		if err := reg.Watch(rdb); err != nil {
			t.Fatalf("Watch = %v, want nil", err)
		}
		wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 100ms"), watchdog.WithMaxHold(time.Second))
		if err != nil {
			t.Fatalf("Attach = %v, want nil", err)
		}
		t.Cleanup(wd.Stop)
		locker := redislock.New(rdb)
		obtain := func(key string) {
			t.Helper()
			if _, err := locker.Obtain(ctx, key, scenarioTTL, nil); err != nil {
				t.Fatalf("Obtain(%q) = %v, want nil", key, err)
			}
		}
		at := func(step string, start time.Time) {
			t.Helper()
			synctest.Wait()
			check(step, wd.Stats(), time.Since(start))
		}

		// held is renewed before the metrics exist, then kept until its
		// max hold.
		obtain("held")
		if err := wd.Sweep(ctx); err != nil {
			t.Fatalf("Sweep = %v, want nil", err)
		}
		synctest.Wait()
		if st := wd.Stats(); st.Renewals != 1 {
			t.Fatalf("Stats().Renewals = %d after one Sweep, want 1", st.Renewals)
		}
		instrument(wd)
		start := time.Now()

		obtain("gone")
		obtain("taken")
		time.Sleep(250 * time.Millisecond)
		at(stepRenewing, start)
		at(stepAgain, start)

		m.Del("gone")
		if err := m.Set("taken", "another owner"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // past held's max hold
		at(stepLost, start)

		time.Sleep(500 * time.Millisecond)
		at(stepIdle, start)

		obtain("unreachable")
		time.Sleep(150 * time.Millisecond)
		m.SetError("LOADING Redis is loading the dataset in memory")
		time.Sleep(2 * scenarioTTL)
		m.SetError("")
		obtain("live")
		time.Sleep(250 * time.Millisecond)
		at(stepEnd, start)
	})
}

// wantLosses is what Stats().Losses is at each step.
var wantLosses = map[string]watchdog.Losses{
	stepRenewing: {},
	stepAgain:    {},
	stepLost:     {Gone: 1, Taken: 1, MaxHold: 1},
	stepIdle:     {Gone: 1, Taken: 1, MaxHold: 1},
	stepEnd:      {Gone: 1, Taken: 1, MaxHold: 1, Unreachable: 1},
}

// wantTracked is what Stats().Tracked is at each step.
var wantTracked = map[string]int{stepRenewing: 3, stepAgain: 3, stepLost: 0, stepIdle: 0, stepEnd: 1}

// wantHeadroom says at which steps a headroom is reported.
var wantHeadroom = map[string]bool{stepRenewing: true, stepAgain: false, stepLost: true, stepIdle: false, stepEnd: true}

// checkStats checks that the scenario did what it is meant to, so that
// the metrics are compared with the right numbers.
func checkStats(t testing.TB, step string, st watchdog.Stats) {
	t.Helper()
	if st.Losses != wantLosses[step] {
		t.Errorf("%s: Stats().Losses = %+v, want %+v", step, st.Losses, wantLosses[step])
	}
	if st.Tracked != wantTracked[step] {
		t.Errorf("%s: Stats().Tracked = %d, want %d", step, st.Tracked, wantTracked[step])
	}
	if st.Renewals < 3 {
		t.Errorf("%s: Stats().Renewals = %d, want at least 3", step, st.Renewals)
	}
	if step == stepEnd && st.RenewErrors == 0 {
		t.Errorf("%s: Stats().RenewErrors = 0 after Redis failed, want more", step)
	}
}
