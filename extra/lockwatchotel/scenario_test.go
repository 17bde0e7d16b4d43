package lockwatchotel_test

// The scenario the instruments are tested with: a watchdog on miniredis in a
// synctest bubble, its locks renewed, lost for each reason, its endpoint
// down and up again (a holder told its lock may be lost, renewals past
// their deadline), then silent for a while (a renewal call hedged).
// extra/lockwatchprom has the same scenario: each module tests with
// helpers of its own, so that neither depends on another module's
// unexported code.

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// Steps of the scenario at which check is called.
const (
	stepRenewing = "renewing" // three locks tracked and being renewed
	stepAgain    = "again"    // at once after stepRenewing: nothing happened since
	stepLost     = "lost"     // one lock gone, one taken, one past its max hold
	stepIdle     = "idle"     // nothing tracked for a while: nothing renewed since stepLost
	stepDown     = "down"     // Redis fails: the endpoint is down, its lock not given up yet
	stepEnd      = "end"      // one lost while Redis failed, one tracked and renewed
	stepStalled  = "stalled"  // Redis stopped answering for a while: a renewal call hedged, nothing lost
)

// scenarioTTL is the TTL of every lock of the scenario.
const scenarioTTL = 300 * time.Millisecond

// latency is the time every read from the scenario's server takes, so that
// sweeps take time on the bubble's clock.
const latency = 2 * time.Millisecond

// stall is how long the server stops answering before stepStalled.
const stall = 150 * time.Millisecond

// scenarioAddr is the address of the scenario's client, the name of its
// endpoint. It is never dialled; an IP literal needs no name lookup, which
// would crash the bubble.
const scenarioAddr = "127.0.0.1:6379"

// slowConn is a connection to miniredis whose every read takes latency,
// and waits while stalled is set: the server does not answer then.
type slowConn struct {
	net.Conn
	stalled *atomic.Bool
}

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(latency)
	for c.stalled.Load() {
		time.Sleep(time.Millisecond)
	}
	return c.Conn.Read(p)
}

// renewals is what the watchdog reported of its renewal pipelines, to
// compare lockwatch.headroom with.
type renewals struct {
	pipelines   uint64  // Renewed calls
	sum         float64 // of their headrooms
	late        uint64  // of them, with a headroom of 0.33 or less
	least, most float64
	swept       time.Duration // the sweeps' durations, as Swept reported them
}

// recorder is an observer that records renewals.
type recorder struct {
	mu sync.Mutex // guards r
	r  renewals
}

func (rec *recorder) Renewed(_ string, _ int, headroom float64) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := &rec.r
	if r.pipelines == 0 || headroom < r.least {
		r.least = headroom
	}
	if r.pipelines == 0 || headroom > r.most {
		r.most = headroom
	}
	r.pipelines++
	r.sum += headroom
	if headroom <= 0.33 {
		r.late++
	}
}

func (rec *recorder) RenewFailed(string, int, error) {}
func (rec *recorder) Lost(registry.Lock, error)      {}
func (rec *recorder) Swept(_ string, d time.Duration) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.r.swept += d
}

// snapshot returns what rec recorded.
func (rec *recorder) snapshot() renewals {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.r
}

// runScenario drives a watchdog (schedule @every 100ms, max hold 1s) on
// miniredis inside a synctest bubble, with locks obtained through
// redislock on a watched client. instrument is called once one lock has
// been renewed (so that a count made before it exists); check is called at
// each step, when every goroutine of the bubble is idle, with the
// watchdog's Stats, what the watchdog reported of its renewal pipelines
// since instrument, and the simulated time since instrument.
func runScenario(t *testing.T, instrument func(*watchdog.Watchdog), check func(step string, st watchdog.Stats, r renewals, elapsed time.Duration)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		t.Cleanup(m.Close)
		var stalled atomic.Bool
		dial := func(context.Context, string, string) (net.Conn, error) {
			c, err := m.Dial()
			if err != nil {
				return nil, err
			}
			return slowConn{c, &stalled}, nil
		}
		rdb := redis.NewClient(&redis.Options{Addr: scenarioAddr, Dialer: dial, MaxRetries: -1})
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
		rec := &recorder{}
		at := func(step string, start time.Time) {
			t.Helper()
			synctest.Wait()
			check(step, wd.Stats(), rec.snapshot(), time.Since(start))
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
		wd.AddObserver(rec)
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
		time.Sleep(scenarioTTL / 2)
		at(stepDown, start)
		time.Sleep(2*scenarioTTL - scenarioTTL/2)
		m.SetError("")
		obtain("live")
		time.Sleep(250 * time.Millisecond)
		at(stepEnd, start)

		// The server stops answering 50 ms before live's next renewal, for
		// longer than that call is waited for (half the time left to the
		// lock's deadline; then it is hedged), and answers again before
		// live's holder must be told.
		stalled.Store(true)
		time.Sleep(stall)
		stalled.Store(false)
		time.Sleep(scenarioTTL)
		at(stepStalled, start)
	})
}

// wantLosses is what Stats().Losses is at each step.
var wantLosses = map[string]watchdog.Losses{
	stepRenewing: {},
	stepAgain:    {},
	stepLost:     {Gone: 1, Taken: 1, MaxHold: 1},
	stepIdle:     {Gone: 1, Taken: 1, MaxHold: 1},
	stepDown:     {Gone: 1, Taken: 1, MaxHold: 1},
	stepEnd:      {Gone: 1, Taken: 1, MaxHold: 1, Unreachable: 1},
	stepStalled:  {Gone: 1, Taken: 1, MaxHold: 1, Unreachable: 1},
}

// wantTracked is what Stats().Tracked is at each step.
var wantTracked = map[string]int{stepRenewing: 3, stepAgain: 3, stepLost: 0, stepIdle: 0, stepDown: 1, stepEnd: 1, stepStalled: 1}

// wantUnconfirmed is what Stats().Unconfirmed is at each step (0 when
// not listed): unreachable's holder is told before its lock is given up;
// live's renewal is answered, late, before its holder must be told.
var wantUnconfirmed = map[string]int64{stepEnd: 1, stepStalled: 1}

// checkStats checks that the scenario did what it is meant to, so that
// the metrics are compared with the right numbers.
func checkStats(t testing.TB, step string, st watchdog.Stats, r renewals) {
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
	if len(st.Endpoints) != 1 || st.Endpoints[0].Endpoint != scenarioAddr || st.Endpoints[0].Down != (step == stepDown) {
		t.Errorf("%s: Stats().Endpoints = %+v, want %s alone, down only at step %s", step, st.Endpoints, scenarioAddr, stepDown)
	}
	if (step == stepDown || step == stepEnd) && st.RenewErrors == 0 {
		t.Errorf("%s: Stats().RenewErrors = 0 after Redis failed, want more", step)
	}
	// At stepStalled live's holder may have been told too: its tell time
	// allows for how long this process's goroutines lately waited for a
	// CPU (the runtime's scheduling latencies, real time that the
	// bubble's clock does not hide), and on a loaded machine that can
	// bring it before the stalled call's answer (CI run 136, two CPU
	// burners: Unconfirmed 2). The metrics are compared with Stats either
	// way.
	if got, want := st.Unconfirmed, wantUnconfirmed[step]; got != want && (step != stepStalled || got != want+1) {
		t.Errorf("%s: Stats().Unconfirmed = %d, want %d", step, got, want)
	}
	// While Redis answers at once, no renewal is late; unreachable's,
	// retried while Redis failed, went past its deadline.
	switch step {
	case stepRenewing, stepAgain, stepLost, stepIdle:
		if st.DeadlinesMissed != 0 {
			t.Errorf("%s: Stats().DeadlinesMissed = %d, want 0", step, st.DeadlinesMissed)
		}
	case stepEnd, stepStalled:
		if st.DeadlinesMissed == 0 {
			t.Errorf("%s: Stats().DeadlinesMissed = 0 after renewals failed for a TTL, want more", step)
		}
	}
	// Every call is answered (with an error while Redis fails) until the
	// server stalls: then live's renewal call is hedged.
	if hedged := st.Hedges > 0; hedged != (step == stepStalled) {
		t.Errorf("%s: Stats().Hedges = %d, want more than 0 only at step %s", step, st.Hedges, stepStalled)
	}
	if len(st.Endpoints) == 1 && (st.Endpoints[0].Missed != st.DeadlinesMissed || st.Endpoints[0].Hedges != st.Hedges) {
		t.Errorf("%s: the endpoint's Missed %d, Hedges %d; want the watchdog's, %d and %d", step, st.Endpoints[0].Missed, st.Endpoints[0].Hedges, st.DeadlinesMissed, st.Hedges)
	}
	if r.pipelines == 0 || r.least <= 0 || r.most > 1 {
		t.Errorf("%s: %d renewal pipelines with headrooms from %v to %v, want some, all in (0, 1]", step, r.pipelines, r.least, r.most)
	}
}
