// Package metricstest is the scenario the metrics modules under extra/ test
// their instruments with: a watchdog on miniredis in a synctest bubble, its
// locks renewed, lost for each reason, and renewed again.
package metricstest

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
	StepRenewing = "renewing" // three locks tracked and being renewed
	StepAgain    = "again"    // at once after StepRenewing: nothing renewed since
	StepLost     = "lost"     // one lock gone, one taken, one past its max hold
	StepIdle     = "idle"     // nothing tracked for a while: nothing renewed since StepLost
	StepEnd      = "end"      // one lost while Redis failed, one tracked and renewed
)

// ScenarioTTL is the TTL of every lock of the scenario.
const ScenarioTTL = 300 * time.Millisecond

// Latency is the time every read from the scenario's server takes, so that
// sweeps take time on the bubble's clock.
const Latency = 2 * time.Millisecond

// slowDialer returns dial with every read of its connections taking
// Latency more.
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
	time.Sleep(Latency)
	return c.Conn.Read(p)
}

// Run drives a watchdog (schedule @every 100ms, max hold 1s) on
// miniredis inside a synctest bubble (each read taking Latency), with locks obtained through
// redislock on a watched client. instrument is called once one lock has
// been renewed (so that a count made before it exists); check is called at
// each step with the watchdog's Stats, when every goroutine of the bubble
// is idle, and with the simulated time since instrument.
func Run(t *testing.T, instrument func(*watchdog.Watchdog), check func(step string, st watchdog.Stats, elapsed time.Duration)) {
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
			if _, err := locker.Obtain(ctx, key, ScenarioTTL, nil); err != nil {
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
		at(StepRenewing, start)
		at(StepAgain, start)

		m.Del("gone")
		if err := m.Set("taken", "another owner"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // past held's max hold
		at(StepLost, start)

		time.Sleep(500 * time.Millisecond)
		at(StepIdle, start)

		obtain("unreachable")
		time.Sleep(150 * time.Millisecond)
		m.SetError("LOADING Redis is loading the dataset in memory")
		time.Sleep(2 * ScenarioTTL)
		m.SetError("")
		obtain("live")
		time.Sleep(250 * time.Millisecond)
		at(StepEnd, start)
	})
}

// WantLosses is what Stats().Losses is at each step.
var WantLosses = map[string]watchdog.Losses{
	StepRenewing: {},
	StepAgain:    {},
	StepLost:     {Gone: 1, Taken: 1, MaxHold: 1},
	StepIdle:     {Gone: 1, Taken: 1, MaxHold: 1},
	StepEnd:      {Gone: 1, Taken: 1, MaxHold: 1, Unreachable: 1},
}

// WantTracked is what Stats().Tracked is at each step.
var WantTracked = map[string]int{StepRenewing: 3, StepAgain: 3, StepLost: 0, StepIdle: 0, StepEnd: 1}

// WantHeadroom says at which steps a headroom is reported.
var WantHeadroom = map[string]bool{StepRenewing: true, StepAgain: false, StepLost: true, StepIdle: false, StepEnd: true}

// CheckStats checks that the scenario did what it is meant to, so that
// the metrics are compared with the right numbers.
func CheckStats(t testing.TB, step string, st watchdog.Stats) {
	t.Helper()
	if st.Losses != WantLosses[step] {
		t.Errorf("%s: Stats().Losses = %+v, want %+v", step, st.Losses, WantLosses[step])
	}
	if st.Tracked != WantTracked[step] {
		t.Errorf("%s: Stats().Tracked = %d, want %d", step, st.Tracked, WantTracked[step])
	}
	if st.Renewals < 3 {
		t.Errorf("%s: Stats().Renewals = %d, want at least 3", step, st.Renewals)
	}
	if step == StepEnd && st.RenewErrors == 0 {
		t.Errorf("%s: Stats().RenewErrors = 0 after Redis failed, want more", step)
	}
}
